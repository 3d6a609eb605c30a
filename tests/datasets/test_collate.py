"""Batches from workers are ordinary tensors to the user: the shared block they travel in does not leak."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

from episodic import EpisodicDataset, LeRobotDataset
from episodic.datasets.collate import own_storage


def test_own_storage_is_a_slice_without_copy():
    block = torch.zeros(64, dtype=torch.uint8).untyped_storage()
    a = torch.empty(0, dtype=torch.float32).set_(block, 2, (4,))  # bytes 8..24
    b = torch.empty(0, dtype=torch.uint8).set_(block, 32, (8,))
    oa, ob = own_storage(a), own_storage(b)
    assert oa.data_ptr() == a.data_ptr() and oa.untyped_storage().nbytes() == 16
    oa.fill_(1.0)
    assert torch.equal(a, oa) and (ob == 0).all()
    buf = io.BytesIO()
    torch.save({"a": oa, "b": ob}, buf)  # with the shared block: "Cannot save multiple tensors ... as different types"
    with pytest.raises(RuntimeError, match="different types"):
        torch.save({"a": a, "b": b}, io.BytesIO())


@pytest.mark.parametrize("native", [False, True])
def test_worker_batches_save_pickle_copy_and_stay_independent(small_root, native):
    deltas = {"action": [0.0, 1 / 30], "observation.state": [-1 / 30, 0.0]}
    if native:
        ds = EpisodicDataset(small_root, delta_timestamps=deltas)
        loader = ds.loader(batch_size=4, num_workers=2, shuffle=False)
    else:
        ds = LeRobotDataset("x", root=small_root, delta_timestamps=deltas)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
    batch = next(iter(loader))
    buf = io.BytesIO()
    torch.save(batch, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    again = pickle.loads(pickle.dumps(batch))
    deep = copy.deepcopy(batch)
    for k, v in batch.items():
        if torch.is_tensor(v):
            assert torch.equal(loaded[k], v) and torch.equal(again[k], v) and torch.equal(deep[k], v), k
    before = {k: v.clone() for k, v in batch.items() if torch.is_tensor(v)}
    batch["action"].add_(1)
    batch["index"].zero_()
    for k, v in before.items():
        if k not in ("action", "index"):
            assert torch.equal(batch[k], v), k
