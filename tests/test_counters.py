"""counters.py: one table per dataset, a row per process, summed over forked DataLoader workers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from episodic.counters import FIELDS, Counters, Tally


def test_sum_gauge_min_and_local():
    c = Counters()
    assert c.snapshot()["processes"] == 0 and c.snapshot()["first_item_seconds"] is None
    c.add(bytes_fetched=10, decoder_open=3, first_item_seconds=0.5)
    c.add(bytes_fetched=5, decoder_open=2, first_item_seconds=0.7)
    s = c.snapshot()
    assert s["bytes_fetched"] == 15 and s["decoder_open"] == 2 and s["first_item_seconds"] == 0.5
    assert s["processes"] == 1 and c.local()["bytes_fetched"] == 15 and c.bytes_fetched == 15
    with pytest.raises(AttributeError, match="no counter 'nope'"):
        c.nope  # noqa: B018
    with pytest.raises(KeyError):
        c.add(nope=1)


def test_timer_counts_also_when_the_block_raises():
    c = Counters()
    with pytest.raises(RuntimeError):
        with c.timer("decode_seconds"):
            raise RuntimeError("x")
    assert c.snapshot()["decode_seconds"] > 0


def test_threads_of_one_process_do_not_lose_increments():
    c = Counters()

    def work():
        for _ in range(2000):
            c.add(items_built=1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.snapshot()["items_built"] == 8000


class _Counting(torch.utils.data.Dataset):
    def __init__(self):
        self.counters = Counters()

    def __len__(self):
        return 12

    def __getitem__(self, i):
        self.counters.add(items_built=1, frames_emitted=i)
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_counts_of_forked_workers_add_up_in_the_parent(workers):
    ds = _Counting()
    for _ in range(2):  # non-persistent workers: a second epoch forks them again, into the same rows
        assert sorted(
            torch.cat(list(torch.utils.data.DataLoader(ds, batch_size=3, num_workers=workers))).tolist()
        ) == list(range(12))
    s = ds.counters.snapshot()
    assert s["items_built"] == 24 and s["frames_emitted"] == 2 * sum(range(12))
    assert s["processes"] == max(workers, 1)


def test_every_field_has_a_known_kind():
    assert set(FIELDS.values()) <= {"sum", "gauge", "min"}


class _Tallied(torch.utils.data.Dataset):
    def __init__(self):
        self.tally = Tally(5)

    def __len__(self):
        return 20

    def __getitem__(self, i):
        self.tally.add([i % 5, i % 2])  # two counts per item
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_tally_counts_of_forked_workers_add_up_in_the_parent(workers):
    ds = _Tallied()
    list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers))
    want = np.bincount(np.r_[np.arange(20) % 5, np.arange(20) % 2], minlength=5)
    assert ds.tally.totals().tolist() == want.tolist()
    ds.tally.add(np.array([4, 4]))
    assert ds.tally.totals()[4] == want[4] + 2 and ds.tally.totals().dtype == np.int64
