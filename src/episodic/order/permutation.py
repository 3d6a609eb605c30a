"""Keyed, stateless permutation of ``[0, n)``: ``index = permute(position, n, seed, epoch)``.

A balanced Feistel network over the smallest even-bit-width power-of-two domain
``D >= n`` (so ``D < 4n``), combining halves by addition modulo ``2**half`` (so odd
permutations are reachable, which XOR rounds would exclude), with cycle walking to restrict
it to ``[0, n)`` (the construction behind Grain's ``index_shuffle``). The round function is the
SplitMix64 finalizer applied to ``right ^ round_key``, with 6 rounds for large
domains and more for small ones (``ceil(60 / half_bits)``), where few rounds leave
measurable bias in pair statistics; the round keys are derived
from ``(seed, epoch)`` alone, so the permutation is a pure function of
``(seed, epoch, position)``: memory is O(1), any position is computed
independently of the others, and no RNG state exists to synchronise or save.

Everything is vectorised over numpy ``uint64`` arrays; cycle walking re-applies
the network only to the lanes that are still out of range (expected < 4 passes).
`permute_lanes` is the same permutation with its own ``(n, seed, epoch)`` per lane (a mixture's
entries in one batch): identical values, one vectorised pass instead of one call per key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

__all__ = ["GOLDEN", "MASK64", "MIX1", "MIX2", "ROUNDS", "permute", "permute_lanes", "round_keys", "unpermute"]

ROUNDS = 6
# SplitMix64's constants, shared by every key derivation of the order package (Python ints)
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # the increment (2**64 / golden ratio)
MIX1 = 0xBF58476D1CE4E5B9  # first multiplier of the finalizer
MIX2 = 0x94D049BB133111EB  # second multiplier of the finalizer
_MASK64 = MASK64
_GOLDEN = GOLDEN
_C1 = np.uint64(MIX1)
_C2 = np.uint64(MIX2)


def _mix64(x: int) -> int:
    """SplitMix64 (increment + finalizer) on a Python int, modulo 2**64."""
    x = (x + GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


def round_keys(seed: int, epoch: int, rounds: int = ROUNDS) -> list[int]:
    """The Feistel round keys for ``(seed, epoch)``: distinct, well mixed 64-bit ints."""
    state = _mix64(_mix64(int(seed) & _MASK64) ^ (int(epoch) & _MASK64))
    keys = []
    for _ in range(rounds):
        state = _mix64(state)
        keys.append(state)
    return keys


def _rounds(half: int) -> int:
    # Small halves need more rounds: the distance of an r-round Feistel network from a
    # random permutation on pairs of inputs decays roughly like 2**(-half * r / 2).
    return max(ROUNDS, -(-60 // half))


def _domain_bits(n: int) -> int:
    bits = max(2, (n - 1).bit_length())
    return bits + (bits & 1)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, in place on a uint64 array."""
    tmp = np.empty_like(z)
    for shift, mult in ((30, _C1), (27, _C2)):
        np.right_shift(z, np.uint64(shift), out=tmp)
        z ^= tmp
        z *= mult
    np.right_shift(z, np.uint64(31), out=tmp)
    z ^= tmp
    return z


_TABLE_HALF = 12  # halves up to 12 bits use precomputed round-function tables
_FULL_TABLE_HALF = 9  # domains up to 2**18 are tabulated whole (2 MB), once per (seed, epoch, direction): `_step`


def _round_functions(keys: np.ndarray, half: int) -> list:
    """F_k(right) = splitmix64_finalizer(right ^ k) mod 2**half for each round key k."""
    mask = np.uint64((1 << half) - 1)
    if half <= _TABLE_HALF:  # as tables: one gather per round instead of ~10 array ops
        tables = _mix_array(keys[:, None] ^ np.arange(1 << half, dtype=np.uint64)[None, :]) & mask
        return [t.__getitem__ for t in tables]

    def make(k):
        def f(right):
            z = _mix_array(right ^ k)
            z &= mask
            return z

        return f

    return [make(k) for k in keys]


def _feistel(x: np.ndarray, rounds: list, half: int, inverse: bool) -> np.ndarray:
    """One pass of the network on [0, 4**half); a round is ``left += F(right) mod 2**half; swap``."""
    h = np.uint64(half)
    mask = np.uint64((1 << half) - 1)
    left = x >> h
    right = x & mask
    if not inverse:
        for f in rounds:
            left += f(right)
            left &= mask
            left, right = right, left
    else:
        for f in reversed(rounds):
            left, right = right, left
            left -= f(right)
            left &= mask
    left <<= h
    left |= right
    return left


@functools.lru_cache(maxsize=8)
def _step(half: int, seed: int, epoch: int, inverse: bool) -> Callable[[np.ndarray], np.ndarray]:
    """One pass of the network for (seed, epoch) in one direction, kept for the calls that follow (a sampler asks
    for every batch): over a small domain, a lookup in the whole domain's table, computed once; else the
    network itself (its round functions computed once)."""
    keys = _round_functions(np.array(round_keys(seed, epoch, _rounds(half)), dtype=np.uint64), half)
    if half <= _FULL_TABLE_HALF:  # small domain: one pass over all of it, then walk by lookups
        table = _feistel(np.arange(1 << (2 * half), dtype=np.uint64), keys, half, inverse)
        table.flags.writeable = False
        return table.__getitem__
    return lambda v: _feistel(v, keys, half, inverse)


def _walk(values, n: int, seed: int, epoch: int, inverse: bool):
    scalar = np.ndim(values) == 0
    x = np.asarray(values)
    if x.size and (x.min() < 0 or x.max() >= n):
        raise ValueError(f"values must lie in [0, {n}), got range [{x.min()}, {x.max()}]")
    if n <= 1:
        out = np.zeros(x.shape, dtype=np.int64)
        return int(out) if scalar else out
    step = _step(_domain_bits(n) // 2, int(seed), int(epoch), inverse)
    out = step(x.astype(np.uint64).reshape(-1))
    lanes = np.flatnonzero(out >= n)
    while lanes.size:  # cycle walking, only on the lanes still outside [0, n)
        y = step(out[lanes])
        out[lanes] = y
        lanes = lanes[y >= n]
    out = out.astype(np.int64).reshape(x.shape)
    return int(out) if scalar else out


def permute(positions, n: int, seed: int = 0, epoch: int = 0):
    """Map positions in ``[0, n)`` to indices in ``[0, n)`` by the ``(seed, epoch)`` bijection.

    ``positions`` may be an int or an integer array (any shape); returns the same shape
    (``int`` or ``np.int64`` array). ``permute(np.arange(n), n, s, e)`` is a permutation.
    """
    return _walk(positions, int(n), seed, epoch, inverse=False)


def unpermute(indices, n: int, seed: int = 0, epoch: int = 0):
    """Inverse of :func:`permute`: ``unpermute(permute(p, n, s, e), n, s, e) == p``."""
    return _walk(indices, int(n), seed, epoch, inverse=True)


def _mix64_array(x: np.ndarray) -> np.ndarray:
    """SplitMix64 (increment + finalizer) on a uint64 array, modulo 2**64 (= `_mix64` lane by lane)."""
    with np.errstate(over="ignore"):
        return _mix_array(x + np.uint64(GOLDEN))


def _bit_length(v: np.ndarray) -> np.ndarray:
    """int.bit_length of each non-negative int64, exactly."""
    v = v.astype(np.int64).copy()
    out = np.zeros(v.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = v >= (np.int64(1) << shift)
        out += shift * big
        v = np.where(big, v >> shift, v)
    return out + (v > 0)


def permute_lanes(positions, n, seed, epoch) -> np.ndarray:
    """``permute(positions[i], n[i], seed[i], epoch[i])`` for every lane i, in one vectorised pass (int64 arrays
    of one shape; `seed` and `epoch` are taken modulo 2**64 like `permute` does). Lanes with ``n <= 1`` give 0."""
    x = np.asarray(positions, dtype=np.int64)
    shape = x.shape
    x = x.reshape(-1)
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), shape).reshape(-1)
    if x.size and ((x < 0).any() or (x >= np.maximum(n, 1)).any()):
        bad = np.flatnonzero((x < 0) | (x >= np.maximum(n, 1)))[0]
        raise ValueError(f"positions must lie in [0, n) lane by lane, got {int(x[bad])} for n={int(n[bad])}")
    as_u64 = lambda v: np.broadcast_to(np.asarray(v), shape).reshape(-1).astype(np.int64).view(np.uint64)  # noqa: E731
    seed_u, epoch_u = as_u64(seed), as_u64(epoch)
    bits = np.maximum(2, _bit_length(np.maximum(n, 1) - 1))  # _domain_bits, lane by lane
    bits += bits & 1
    half = bits // 2
    rounds = np.maximum(ROUNDS, -(-60 // half))
    max_rounds = int(rounds.max()) if x.size else 0
    state = _mix64_array(_mix64_array(seed_u.copy()) ^ epoch_u)  # round_keys
    keys = np.empty((max_rounds, x.size), dtype=np.uint64)
    for r in range(max_rounds):
        state = _mix64_array(state)
        keys[r] = state
    h = half.astype(np.uint64)
    mask = (np.uint64(1) << h) - np.uint64(1)
    out = x.astype(np.uint64)
    lanes = np.flatnonzero(n > 1)
    out[n <= 1] = 0
    while lanes.size:
        v = out[lanes]
        hl, ml, rl = h[lanes], mask[lanes], rounds[lanes]
        left, right = v >> hl, v & ml
        for r in range(int(rl.max())):
            on = r < rl
            f = _mix_array(right ^ keys[r, lanes]) & ml
            new_left = np.where(on, right, left)
            new_right = np.where(on, (left + f) & ml, right)
            left, right = new_left, new_right
        out[lanes] = (left << hl) | right
        lanes = lanes[out[lanes] >= n[lanes].astype(np.uint64)]  # cycle walking
    return out.astype(np.int64).reshape(shape)
