"""Where a batch's tensors live: recycled frame buffers in the process that hands batches out, one
shared-memory block in a DataLoader worker, handed to the main process without a copy.

Frames are the bulk of a batch (2 cameras at 480x640, batch 32: 59 MB as uint8, 236 MB as float32). Asking the
allocator for that much every batch costs more than filling it: large allocations are fresh pages from the
kernel, each faulted in and zeroed on first write (~150 ms for 236 MB on this 2-core machine, against ~30 ms
for writing warm memory). So the main process hands out frames from a `FramePool` of buffers it recycles as
soon as nothing outside the pool holds them (no view, no numpy array, no item of theirs alive), keeping at
most two batches of frames idle. A DataLoader worker writes the whole batch, frames already in the user's dtype,
into one shared-memory block, a slot of its `SlotRing` reused batch after batch; the main process hands the
batch out as views of that slot (`receive`: no copy, no conversion in the one process every batch passes
through) and gives the slot back to its worker once nothing holds any of those views (`release_received`,
the same test as the frame pool's).

`place` is the one entry point: given the arrays a batch already has and the shapes it still needs, it
returns all of them as tensors in the right memory for this process.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .. import runtime

POOL_MIN_BYTES = 1 << 20  # smaller arrays come from the allocator: its free lists serve them warm already


@dataclass(frozen=True)
class Empty:
    """A tensor still to be filled: its shape and numpy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def _holders(base: torch.Tensor) -> tuple[int | None, int]:
    """(use count of base's storage, references to its Python storage object): other tensors and views
    raise the first (a numpy array of one holds that tensor), a storage handle someone took with
    `.untyped_storage()` (the same Python object as ours) raises the second."""
    s = base.untyped_storage()
    return runtime.storage_use_count(s), sys.getrefcount(s)


_ALONE = _holders(torch.empty(1, dtype=torch.uint8))  # a storage nobody else holds


def _unused(base: torch.Tensor) -> bool:
    return _holders(base) == _ALONE


class FramePool:
    """Large buffers recycled across batches. `take` hands out tensors on storages nobody else holds; the pool keeps
    idle at most `keep_batches` times the bytes of the largest batch it was asked for (beyond that, idle buffers are
    left to the allocator; buffers in use do not count). Thread-safe (the DataLoader's pin-memory thread unpickles
    batches too). Without torch's storage use count (`runtime.storage_use_count`, a private API: checked, not assumed)
    every buffer is fresh."""

    def __init__(self, keep_batches: int = 2):
        self.keep_batches = keep_batches
        self._kept: OrderedDict[int, list[torch.Tensor]] = OrderedDict()  # nbytes -> uint8 base tensors
        self._lock = threading.Lock()
        self._batch_bytes = 0
        self.enabled = _ALONE[0] is not None
        runtime.after_fork(self)

    def _after_fork(self) -> None:  # a forked worker's frames go to shared memory: the parent's buffers are not its own
        self._kept = OrderedDict()
        self._lock = threading.Lock()

    def take(self, wanted: list[Empty]) -> list[torch.Tensor]:
        """Tensors of these shapes and dtypes, one batch's worth: recycled storages when free, else new ones."""
        big = sum(e.nbytes for e in wanted if e.nbytes >= POOL_MIN_BYTES)
        out = []
        with self._lock:
            self._batch_bytes = max(self._batch_bytes, big)
            for e in wanted:
                dtype = torch.from_numpy(np.empty(0, e.dtype)).dtype
                if not self.enabled or e.nbytes < POOL_MIN_BYTES:
                    out.append(torch.empty(e.shape, dtype=dtype))
                    continue
                base = self._free(e.nbytes)
                if base is None:
                    base = torch.empty(e.nbytes, dtype=torch.uint8)
                    self._keep(base)
                out.append(_tensor_on(base.untyped_storage(), 0, e.shape, dtype))
            if self.enabled and big:
                self._trim()
        return out

    def _free(self, nbytes: int) -> torch.Tensor | None:
        for base in self._kept.get(nbytes, ()):
            if _unused(base):
                return base
        return None

    def _keep(self, base: torch.Tensor) -> None:
        self._kept.setdefault(base.numel(), []).append(base)
        self._kept.move_to_end(base.numel())

    def _trim(self) -> None:
        """Drop idle buffers (oldest sizes first) beyond `keep_batches` batches: buffers some batch still
        uses do not count (their memory is the user's until released)."""
        limit = self.keep_batches * self._batch_bytes
        idle = [(n, b) for n, bases in self._kept.items() for b in bases if _unused(b)]
        excess = sum(n for n, _ in idle) - limit
        for n, b in idle:
            if excess <= 0:
                break
            self._kept[n] = [x for x in self._kept[n] if x is not b]  # identity: == on tensors is elementwise
            if not self._kept[n]:
                del self._kept[n]
            excess -= n

    def kept_bytes(self) -> int:
        return sum(n * len(s) for n, s in self._kept.items())


POOL = FramePool()


HEADER = 64  # bytes at the start of a ring slot: byte 0 says whether the main process is done with it
FREE, IN_FLIGHT = 0, 1


class SlotRing:
    """A DataLoader worker's shared-memory blocks, reused across batches: a fresh block costs its pages on
    every batch (~45 ms for the 59 MB of uint8 frames of 2 cameras at 480x640, batch 32, against ~6 ms
    for writing warm memory). A slot is taken for a batch (byte 0 = IN_FLIGHT) and only the main process
    sets it FREE again, once no tensor of the batch it received in it is alive (`release_received`): a batch
    that leaves the worker any other way (a user's own collate function) keeps its slot forever, and once
    `slots` are taken every further batch gets a fresh block, as without the ring. Never waits. The default
    covers a DataLoader's steady state: `prefetch_factor` (2) batches queued, one being built, and the one or
    two the training loop holds."""

    def __init__(self, slots: int = 5):
        self.max_slots = slots
        self.slots: list[torch.Tensor] = []  # uint8 tensors over each whole slot
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        runtime.keep_inherited(self.slots)  # the parent's: never freed here (see `_Received._after_fork`)
        self.slots = []

    def take(self, nbytes: int) -> torch.Tensor | None:
        """A slot of at least HEADER + nbytes bytes, marked IN_FLIGHT; None when every slot is in flight."""
        need = HEADER + nbytes
        for i, slot in enumerate(self.slots):
            if int(slot[0]) == FREE:
                if slot.numel() < need:  # free but too small (a larger batch): replaced
                    slot = self.slots[i] = _new_slot(need)
                slot[0] = IN_FLIGHT
                return slot
        if len(self.slots) < self.max_slots:
            slot = _new_slot(need)
            self.slots.append(slot)
            slot[0] = IN_FLIGHT
            return slot
        return None

    def slot_of(self, t: torch.Tensor) -> torch.Tensor | None:
        ptr = t.untyped_storage().data_ptr()
        return next((s for s in self.slots if s.untyped_storage().data_ptr() == ptr), None)


def _new_slot(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8).share_memory_()


RING = SlotRing()


def place(arrays: dict) -> dict[str, torch.Tensor]:
    """Tensors for a batch's arrays (numpy arrays, placed as they are, or `Empty` to be filled by the caller),
    in the memory this process hands batches out from: in a DataLoader worker, views of one shared-memory
    block (a ring slot when one is free; copies of the arrays given); elsewhere the arrays themselves and
    `POOL` buffers for the empties."""
    if runtime.in_worker():
        offsets, total = _layout(arrays)
        slot = RING.take(total)
        if slot is None:
            return _views(torch.empty(max(total, 1), dtype=torch.uint8).share_memory_(), arrays, offsets, 0)
        return _views(slot, arrays, offsets, HEADER)
    empties = [k for k, v in arrays.items() if isinstance(v, Empty)]
    if not empties:  # tabular only
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    taken = dict(zip(empties, POOL.take([arrays[k] for k in empties])))
    return {k: taken[k] if k in taken else torch.from_numpy(v) for k, v in arrays.items()}


def _tensor_on(storage, offset: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous `dtype` tensor of `shape` over `storage` (an UntypedStorage), from element `offset` on."""
    # torch's stub lists set_(storage, offset, size) only with a stride; set_ itself defaults it (contiguous)
    return torch.empty(0, dtype=dtype).set_(storage, offset, shape)  # type: ignore[call-overload]


def _layout(arrays: dict, align: int = 64) -> tuple[dict[str, int], int]:
    offsets, total = {}, 0
    for key, a in arrays.items():
        offsets[key] = total
        total += -(-a.nbytes // align) * align
    return offsets, total


def _views(block: torch.Tensor, arrays: dict, offsets: dict[str, int], base: int) -> dict[str, torch.Tensor]:
    """Tensors over `block` (uint8, shared) at base + offsets: copies of the numpy arrays, uninitialised ones
    for the `Empty`s."""
    storage = block.untyped_storage()
    out = {}
    for key, a in arrays.items():
        dtype = np.dtype(a.dtype)
        t = _tensor_on(
            storage, (base + offsets[key]) // dtype.itemsize, a.shape, torch.from_numpy(np.empty(0, dtype)).dtype
        )
        if not isinstance(a, Empty):
            t.numpy()[...] = a
        out[key] = t
    return out


def receive(block: torch.Tensor, layout: list) -> dict:
    """In the main process: a batch a worker sent in a ring slot (`block`; `layout`: (key, byte offset, shape,
    numpy dtype) per tensor, or (key, None, value, None) for values sent as they are), as tensors over the slot
    (no copy), each on a storage of its own (a slice of the slot's: `torch.save`, pickle and deepcopy see one
    storage per tensor). The slot goes back to its worker once none of them is alive (`release_received`)."""
    release_received()
    storage = block.untyped_storage()
    out = {}
    for k, off, shape, dt in layout:
        if off is None:
            out[k] = shape
            continue
        dt = np.dtype(dt)
        nbytes = math.prod(shape) * dt.itemsize
        dtype = torch.from_numpy(np.empty(0, dt)).dtype
        out[k] = _tensor_on(storage[off : off + nbytes], 0, tuple(shape), dtype)
    RECEIVED.hold(block)
    return out


def release_received() -> None:
    """Hand back to their workers the slots whose batch nothing holds any more (byte 0 = FREE): the only
    tensor left on the slot's storage is the one kept here (`_holders`, as the frame pool tests its buffers)."""
    kept = []
    for block in RECEIVED.held:
        if _holders(block) == _ALONE:
            block[0] = FREE
            RECEIVED.handed_back.append(block)
        else:
            kept.append(block)
    RECEIVED.held[:] = kept


class _Received:
    """The main process's slots received (`held`: their batch may be alive) and the last ones handed back (their
    mappings stay, so a worker's next batch in a slot maps no new pages here). Without torch's storage use count
    (`runtime.storage_use_count`) no slot is held: it stays taken, and its worker goes on with fresh blocks."""

    def __init__(self) -> None:
        self.held: list[torch.Tensor] = []
        self.handed_back: deque = deque(maxlen=10)  # 2 workers x 5 slots
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        """A forked worker holds none of its parent's slots, and never frees them: a slot shared through the file
        system counts its mappings in the block itself, which a fork copies without counting; freeing the inherited
        tensor here would count one mapping less and unlink the block while its worker and the main process still use
        it (a second loader's workers, forked after the first loader's batches arrived: the main process then failed
        to open the first loader's next batch, or aborted unlinking a block twice)."""
        runtime.keep_inherited(self.held, self.handed_back)
        self.held, self.handed_back = [], deque(maxlen=10)

    def hold(self, block: torch.Tensor) -> None:
        """Hold a slot just received; a slot received before (the worker reuses its slots) is held by the new
        tensor only: a second tensor of ours on its storage would count as a holder of the batch."""
        ptr = block.data_ptr()
        self.handed_back = deque((b for b in self.handed_back if b.data_ptr() != ptr), maxlen=10)
        if _ALONE[0] is not None:
            self.held.append(block)


RECEIVED = _Received()
