"""Frame buffers recycled across batches only when nothing outside the pool holds them."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from episodic.datasets.memory import POOL_MIN_BYTES, Empty, FramePool

pytestmark = pytest.mark.skipif(not FramePool().enabled, reason="this torch has no storage use count: no recycling")

BIG = (4, 3, 256, 256)  # 3 MiB of float32


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


HOLDERS = {
    "view": lambda t: t[1:],
    "numpy": lambda t: t.numpy(),
    "unbind": lambda t: t.unbind(0)[2],
    "reshape": lambda t: t.reshape(-1),
    "storage": lambda t: t.untyped_storage(),
    "itself": lambda t: t,
}


@pytest.mark.parametrize("holder", sorted(HOLDERS))
def test_a_held_buffer_is_never_reused_a_dropped_one_is(holder):
    pool = FramePool()
    (a,) = pool.take([Empty(BIG, np.dtype(np.float32))])
    a_ptr = _ptr(a)
    keep = HOLDERS[holder](a)
    del a
    gc.collect()
    (c,) = pool.take([Empty(BIG, np.dtype(np.float32))])
    assert _ptr(c) != a_ptr, f"reused while a {holder} of it was alive"
    c_ptr = _ptr(c)
    del keep, c
    gc.collect()
    (d,) = pool.take([Empty(BIG, np.dtype(np.float32))])
    assert _ptr(d) in (a_ptr, c_ptr)  # recycled: no fresh pages


def test_recycling_alternates_between_two_batches_and_keeps_at_most_two():
    pool = FramePool(keep_batches=2)
    wanted = [Empty(BIG, np.dtype(np.float32)), Empty((4, 3, 512, 512), np.dtype(np.uint8))]
    seen = set()
    prev = None
    for _ in range(6):  # the training-loop pattern: batch n is alive while n + 1 is made
        cur = pool.take(wanted)
        seen.update(_ptr(t) for t in cur)
        assert not ({_ptr(t) for t in cur} & ({_ptr(t) for t in prev} if prev else set()))
        prev = cur
    assert len(seen) == 4  # two batches' worth of storages, reused ever after
    assert pool.kept_bytes() <= 2 * sum(e.nbytes for e in wanted)


def test_contents_of_a_held_batch_never_change():
    pool = FramePool()
    (a,) = pool.take([Empty(BIG, np.dtype(np.float32))])
    a.fill_(1.0)
    for v in range(2, 6):
        (b,) = pool.take([Empty(BIG, np.dtype(np.float32))])
        b.fill_(float(v))
        del b
    assert bool((a == 1.0).all())


def test_small_arrays_are_not_pooled():
    pool = FramePool()
    small = (POOL_MIN_BYTES // 8,)
    (a,) = pool.take([Empty(small, np.dtype(np.float32))])
    assert a.shape == small and pool.kept_bytes() == 0


def test_ring_reuses_a_slot_only_after_the_batch_received_in_it_is_dropped():
    from episodic.datasets import memory

    ring = memory.SlotRing(slots=2)
    a = ring.take(1000)
    b = ring.take(1000)
    assert a is not None and b is not None and ring.take(1000) is None  # both in flight: caller falls back
    a[memory.HEADER : memory.HEADER + 4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    layout = [("x", memory.HEADER, (4,), "|u1"), ("task", None, ["t"], None)]
    got = memory.receive(a, layout)
    assert got["x"].tolist() == [1, 2, 3, 4] and got["task"] == ["t"]
    assert got["x"].data_ptr() == a.data_ptr() + memory.HEADER  # a view of the slot: no copy
    assert got["x"].untyped_storage().nbytes() == 4  # on a storage of its own (a slice of the slot's)
    memory.release_received()
    assert ring.take(1000) is None  # the batch is alive: its slot stays taken
    view = got["x"][1:]
    del got
    memory.release_received()
    assert ring.take(1000) is None  # a view of one of its tensors is alive
    del view
    memory.release_received()
    assert ring.take(1000) is a  # dropped: handed back and reused
    assert ring.take(10_000) is None
    got = memory.receive(b, layout)
    del got
    memory.release_received()
    bigger = ring.take(10_000)  # the free slot was too small: replaced by a larger one
    assert bigger is not None and bigger.numel() >= 10_000 + memory.HEADER and bigger is not b


def test_loader_batches_come_through_ring_slots(small_root):
    """Each batch dropped when the next comes: its slot is handed back to its worker and reused, batch after
    batch, so the main process holds only the slots of the batches in flight (2 workers x prefetch 2, and the
    one in the loop's hands), never every slot of the ring (the workers would then need fresh blocks)."""
    from episodic import EpisodicDataset
    from episodic.datasets import memory

    ds = EpisodicDataset(small_root)
    seen, slots = [], set()
    for i, batch in enumerate(ds.loader(batch_size=4, num_workers=2, shuffle=False)):
        seen.append(batch["index"].clone())
        if i >= 10:  # past the first batches, whose slots may still be replaced by larger ones
            slots.add(batch["index"].untyped_storage().data_ptr() // 4096)  # the ring slot the batch came in
        if i == 24:
            break
        assert len(memory.RECEIVED.held) <= 2 * 2 + 2, i
    # 15 batches through at most the 2 x 5 slots of the two rings (slots never handed back: a fresh block each)
    assert len(slots) <= 10, len(slots)
    assert torch.equal(torch.cat(seen), torch.arange(100))


def test_idle_buffers_beyond_two_batches_are_dropped_in_use_ones_kept():
    pool = FramePool(keep_batches=2)
    one = [Empty(BIG, np.dtype(np.float32))]
    held = [pool.take(one)[0] for _ in range(4)]  # four batches alive at once: all kept, none idle
    assert pool.kept_bytes() == 4 * one[0].nbytes
    first = held[0]  # still in use, and first in the pool's list: the idle ones come after it
    del held
    gc.collect()
    pool.take([Empty((2, 3, 256, 256), np.dtype(np.float32))])  # another size: trims the idle ones
    idle = [b for bases in pool._kept.values() for b in bases if b.numel() == one[0].nbytes]
    assert len(idle) <= 3  # the one in use and at most two idle
    assert first.untyped_storage().data_ptr() in {b.untyped_storage().data_ptr() for b in idle}


def test_two_loaders_in_turns_keep_their_shared_blocks(small_root, monkeypatch):
    """A second loader's workers, forked while the main process holds the first loader's ring slots (shared
    through the file system), never free those slots' blocks: both loaders, taking turns, hand out every batch
    (before, the main process failed to open the first loader's next block, unlinked under it)."""
    from episodic import EpisodicDataset

    monkeypatch.setenv("EPISODIC_WORKER_SHARING", "file_system")
    ds = EpisodicDataset(small_root)
    key = ds.meta.video_keys[0]
    loaders = [iter(ds.loader(batch_size=2, num_workers=2, shuffle=False)) for _ in range(2)]
    seen: list[list[torch.Tensor]] = [[], []]
    # 5 turns of 10 batches each: the whole epoch (100 frames) of both; a worker shares its blocks through the
    # file system from its third batch on, so the second loader's workers are forked holding some of those
    for turn in range(5):
        for i, it in enumerate(loaders):
            for _ in range(10):
                batch = next(it)
                seen[i].append(batch["index"].clone())
                if turn == 4:  # contents too: the first item's frame against one built here
                    first = int(batch["index"][0])
                    assert torch.equal(batch[key][0], ds[first][key])
    for got in seen:
        assert torch.equal(torch.cat(got), torch.arange(100))
