"""Resuming a mixture's order after the mixture changed: the defined continuation, refusal, and the state format."""

import json

import numpy as np
import pytest

from episodic.order import (
    QUOTA_BOUND,
    EpisodeFrames,
    MixtureBatchSampler,
    MixtureSampler,
    MixtureState,
    SpecChangeError,
)


def frames(lengths, start=0):
    ends = start + np.cumsum(lengths)
    return EpisodeFrames(ends - np.asarray(lengths), ends)


ENTRIES = {"a": frames([7, 5, 9]), "b": frames([4, 4]), "c": frames([11, 3, 6, 2]), "d": frames([5, 5, 5])}


def sampler(weights: dict, seed=0, **kw):
    names = list(weights)
    return MixtureSampler([ENTRIES[n] for n in names], list(weights.values()), names, seed=seed, **kw)


def run(s, batch, steps, state=None, on_change="continue"):
    """(flat indices consumed, (entry name, draw) of each, saved state) after `steps` steps from `state`."""
    bs = MixtureBatchSampler(s, batch, rank=0, world_size=1, on_change=on_change)
    if state is not None:
        bs.load_state_dict(json.loads(json.dumps(state)))
    out, draws = [], []
    for _ in range(steps):
        epoch, consumed = bs.epoch, bs.consumed
        pos = np.arange(consumed, consumed + batch) % len(s)
        e, d = s.draws_at(pos, epoch)
        draws += [(s.names[i], int(x)) for i, x in zip(e, d)]
        out += next(iter(bs))
        bs.advance(1)
    return out, draws, bs.state_dict()


def test_unchanged_mixture_resumes_exactly():
    s = sampler({"a": 1, "b": 2, "c": 3})
    full, _, _ = run(s, 5, 12)
    first, _, state = run(s, 5, 5)
    rest, _, _ = run(sampler({"a": 1, "b": 2, "c": 3}), 5, 7, state)
    assert first + rest == full


def test_reweighted_entries_continue_their_draws():
    old = sampler({"a": 1, "b": 2, "c": 3}, seed=5)
    _, before, state = run(old, 4, 6)
    new = sampler({"a": 3, "b": 2, "c": 1}, seed=5)
    _, after, _ = run(new, 4, (len(new) - 24) // 4, state)  # to the end of the epoch (padding repeats positions)
    assert MixtureBatchSampler(new, 4).changes == []
    for name in "abc":
        d0 = [d for n, d in before if n == name]
        d1 = [d for n, d in after if n == name]
        assert d1 and d1[0] == d0[-1] + 1 and d1 == list(range(d1[0], d1[0] + len(d1)))  # continues, no repeat
    # the new weights hold from the resume point on
    seq = [n for n, _ in after]
    share = new.units / new.units.sum()
    for i, name in enumerate("abc"):
        c = np.cumsum([n == name for n in seq])
        assert np.abs(c - np.arange(1, len(seq) + 1) * share[i]).max() < 2 * QUOTA_BOUND


def test_added_retired_and_resized_entries():
    old = sampler({"a": 1, "b": 1, "c": 1})
    _, before, state = run(old, 3, 5)
    resized = dict(ENTRIES)
    ENTRIES["c2"] = frames([11, 3, 6])  # 'c' with another number of frames
    try:
        new = MixtureSampler([ENTRIES["a"], ENTRIES["d"], ENTRIES["c2"]], [1, 1, 1], ["a", "d", "c"])
        bs = MixtureBatchSampler(new, 3)
        bs.load_state_dict(state)
        assert any("added: 'd'" in c for c in bs.changes) and any("retired: 'b'" in c for c in bs.changes)
        assert any("another number of frames: 'c'" in c for c in bs.changes)
        _, after, state2 = run(new, 3, 8, state)
    finally:
        ENTRIES.clear()
        ENTRIES.update(resized)
    names = {n for n, _ in after}
    assert "b" not in names
    assert [d for n, d in after if n == "d"][0] == 0  # added: starts at draw 0
    assert [d for n, d in after if n == "c"][0] == 0  # new frame count: a new pass from draw 0
    a0 = [d for n, d in before if n == "a"][-1]
    assert [d for n, d in after if n == "a"][0] == a0 + 1  # kept: continues
    assert MixtureState.from_dict(state2["mixture"]).names == ("a", "d", "c")


def test_refuse_names_every_change():
    _, _, state = run(sampler({"a": 1, "b": 1}), 2, 3)
    with pytest.raises(SpecChangeError) as err:
        run(sampler({"a": 1, "c": 2}), 2, 1, state, on_change="refuse")
    msg = str(err.value)
    assert "added: 'c'" in msg and "retired: 'b'" in msg and "on_change='continue'" in msg


def test_reload_after_a_continuation_is_idempotent():
    _, _, state = run(sampler({"a": 1, "b": 1}), 3, 4)
    new = sampler({"a": 2, "b": 1})
    x, _, s1 = run(new, 3, 0, state)
    y, _, s2 = run(sampler({"a": 2, "b": 1}), 3, 6, s1)
    z, _, _ = run(sampler({"a": 2, "b": 1}), 3, 6, state)
    assert y == z and s1["mixture"] != state["mixture"]


def test_epoch_length_change_ends_the_epoch_when_already_past_it():
    old = sampler({"a": 1, "b": 1}, samples_per_epoch=40)
    _, _, state = run(old, 5, 6)  # consumed 30
    new = sampler({"a": 1, "b": 1, "d": 1}, samples_per_epoch=20)
    bs = MixtureBatchSampler(new, 5)
    bs.load_state_dict(state)
    assert (bs.epoch, bs.consumed) == (1, 0)
    assert len(list(iter(bs))) == 4


def test_state_format_is_validated():
    good = sampler({"a": 1}).mixture_state()
    assert MixtureState.from_dict(json.loads(json.dumps(good))).to_dict() == good
    for bad, field in [
        ({**good, "epoch": -1}, "epoch"),
        ({**good, "samples_per_epoch": 0}, "samples_per_epoch"),
        ({**good, "entries": []}, "entries"),
        ({**good, "entries": [["a", 1, 2]]}, r"entries\[0\]"),
        ({**good, "entries": [["a", -1, 2, 0]]}, r"entries\[0\]"),
        ({**good, "skipped": "x"}, "skipped"),
        ({**good, "entries": [["a", 1, 2, 0], ["a", 1, 2, 0]]}, "unique"),
    ]:
        with pytest.raises(ValueError, match=field):
            MixtureState.from_dict(bad)


def test_only_entries_whose_own_weight_or_size_changed_are_reported():
    """Changing one entry's weight moves every entry's share (and units); only that entry is re-weighted.
    Adding an entry moves every share too, and re-weights none."""
    _, _, state = run(sampler({"a": 1, "b": 2, "c": 3}), 4, 3)
    bs = MixtureBatchSampler(sampler({"a": 1, "b": 5, "c": 3}), 4)
    bs.load_state_dict(json.loads(json.dumps(state)))
    assert bs.changes == ["1 entry re-weighted: 'b'"]
    bs = MixtureBatchSampler(sampler({"a": 1, "b": 2, "c": 3, "d": 4}), 4)
    bs.load_state_dict(json.loads(json.dumps(state)))
    assert bs.changes == ["1 entry added: 'd'", "samples per epoch 51 -> 66"]  # (the default: every frame)
    resized = dict(ENTRIES)
    ENTRIES["c"] = frames([11, 3, 6])  # 'c' with another number of frames, its own weight unchanged
    try:
        bs = MixtureBatchSampler(sampler({"a": 1, "b": 2, "c": 3}), 4)
        bs.load_state_dict(json.loads(json.dumps(state)))
    finally:
        ENTRIES.clear()
        ENTRIES.update(resized)
    assert bs.changes == ["1 entry with another number of frames: 'c'", "samples per epoch 51 -> 49"]
    # the same own weights in another scale: nothing changed in the order, but the weights did
    bs = MixtureBatchSampler(sampler({"a": 2, "b": 4, "c": 6}), 4)
    bs.load_state_dict(json.loads(json.dumps(state)))
    assert bs.changes == ["3 entries re-weighted: 'a', 'b', 'c'"] and bs.sampler.state.units == state_units(state)


def state_units(state) -> tuple:
    return tuple(e[1] for e in state["mixture"]["entries"])


def test_a_state_saved_without_weights_still_loads():
    """States saved before own weights were recorded: re-weighted entries are those whose units changed."""
    _, _, state = run(sampler({"a": 1, "b": 2}), 4, 3)
    del state["mixture"]["weights"]
    same = MixtureBatchSampler(sampler({"a": 1, "b": 2}), 4)
    same.load_state_dict(json.loads(json.dumps(state)))
    assert same.changes == [] and same.state_dict()["mixture"]["weights"] == [1.0, 2.0]
    other = MixtureBatchSampler(sampler({"a": 1, "b": 3}), 4)
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.changes == ["2 entries re-weighted: 'a', 'b'"]
    with pytest.raises(ValueError, match="field 'weights' must be a list of finite numbers"):
        MixtureState.from_dict({**state["mixture"], "weights": [1.0, float("nan")]})
    with pytest.raises(ValueError, match="weights must have one value per entry"):
        MixtureState.from_dict({**state["mixture"], "weights": [1.0]})
