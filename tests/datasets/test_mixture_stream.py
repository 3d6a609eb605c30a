"""StreamingMixtureDataset over real tiny heterogeneous datasets: an epoch streams exactly the whole episodes of
`order.epoch_episodes`, each item equal to the map-style mixture's item for the same frame; exact and elastic
resume; resuming under a changed mixture; a consumer keeps few entries open; realised shares."""

from __future__ import annotations

import logging
import time
from collections import Counter

import numpy as np
import pytest
import torch

from episodic.datasets.consumer import Consumer, iterate_consumer
from episodic.datasets.mixture import MixtureDataset
from episodic.datasets.streaming_mixture import StreamingMixtureDataset
from episodic.mixture import MixtureSpec, preflight
from episodic.order.mixture_state import SpecChangeError
from episodic.order.pool_order import PoolOrder
from episodic.testing.synthetic import mixture_spec

SIZE = (24, 40)


@pytest.fixture(scope="module")
def report(synthetic):
    spec = mixture_spec(
        synthetic,
        delta_timestamps={"action": [0.0, 0.1], "state": [-0.1, 0.0]},
        weighting={"rule": "temperature", "alpha": 0.5},
    )
    spec["entries"][2]["state_indices"] = [1, 0]
    return preflight(MixtureSpec.from_dict(spec))


def _stream(report, **kw) -> StreamingMixtureDataset:
    return StreamingMixtureDataset(report, image_size=SIZE, episode_pool_size=4, seed=1, **kw)


def _ids(batches) -> list[tuple[int, int]]:
    return [(int(d), int(i)) for b in batches for d, i in zip(b["dataset_index"], b["index"])]


def _epoch_frames(ds, epoch: int) -> Counter:
    """(dataset_index, index) of every frame of every slot of the epoch (a frame may be in several slots)."""
    slots, want = ds.epoch_slots(epoch), Counter()
    for e, ep, n in zip(slots.entry.tolist(), slots.episode.tolist(), slots.length.tolist()):
        first = int(ds.report.metadata[ds.layout.entries[e].index].episodes.dataset_from_index[ep])
        want.update((ds.layout.entries[e].index, first + j) for j in range(n))
    return want


def test_an_epoch_is_the_epochs_episodes_with_the_map_style_items(report, tmp_path):
    ds = _stream(report, cache_dir=tmp_path)
    batches = list(ds.loader(batch_size=8, num_workers=2))
    got = _ids(batches)
    slots = ds.epoch_slots(0)
    assert Counter(got) == _epoch_frames(ds, 0) and len(got) == sum(slots.length)
    assert abs(len(got) - len(ds.sampler)) < max(slots.length) * len(ds.layout.entries)
    # every item equals the map-style mixture's item of the same frame
    mds = MixtureDataset(report, image_size=SIZE, cache_dir=tmp_path)
    slot_of = {e.index: e.slot for e in ds.layout.entries}
    for b in batches[::3]:
        flat = [int(ds.sampler.flat_index(slot_of[int(d)], int(i))) for d, i in zip(b["dataset_index"], b["index"])]
        ref = mds.get_batch(flat)
        assert ref.keys() == b.keys()
        for k, v in ref.items():
            assert torch.equal(b[k], v) if torch.is_tensor(v) else b[k] == v, k
    shares = ds.stats()["shares"]  # counted in the workers, summed here
    assert [x["items"] for x in shares["entries"]] == [Counter(d for d, _ in got)[e.index] for e in ds.layout.entries]


def test_resume_exactly_and_on_another_topology(report, tmp_path):
    full = _ids(_stream(report, cache_dir=tmp_path).loader(batch_size=8, num_workers=2))
    ds = _stream(report, cache_dir=tmp_path)
    head = []
    for b in ds.loader(batch_size=8, num_workers=2):
        head.append(b)
        if len(head) == 9:
            break
    state = ds.state_dict()
    assert state["batches_consumed"] == 9 and "mixture" in state
    again = _stream(report, cache_dir=tmp_path)
    again.load_state_dict(state)
    assert _ids(head) + _ids(again.loader(batch_size=8, num_workers=2)) == full
    # elastic: the rest of the epoch on 2 ranks of 1 worker, each frame exactly once
    rest = []
    for rank in range(2):
        r = _stream(report, cache_dir=tmp_path, rank=rank, world_size=2)
        r.load_state_dict(state)
        rest += _ids(r.loader(batch_size=8, num_workers=1, even_batches=False))
    assert Counter(_ids(head)) + Counter(rest) == Counter(full)  # (a frame may be in several slots of an epoch)


def test_resume_under_a_changed_mixture(report, synthetic, tmp_path, caplog):
    ds = _stream(report, cache_dir=tmp_path)
    for i, _ in enumerate(ds.loader(batch_size=8)):
        if i == 2:
            break
    state = ds.state_dict()
    spec = report.spec.to_dict()
    spec["entries"][0]["weight"] = 5.0  # re-weighted
    changed = preflight(MixtureSpec.from_dict(spec))
    with pytest.raises(SpecChangeError, match="re-weighted"):
        _stream(changed, cache_dir=tmp_path, on_change="refuse").load_state_dict(state)
    new = _stream(changed, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        new.load_state_dict(state)
    assert new.epoch == 1 and new.state.batches_consumed == 0 and new.changes
    assert "the rest of epoch 0 is skipped" in caplog.text
    assert len(new.epoch_slots(1)) > 0 and sum(1 for _ in new.loader(batch_size=8)) > 0
    fresh = _stream(report, cache_dir=tmp_path)  # nothing of the epoch consumed: the new mixture from epoch 0
    fresh_state = fresh.state_dict()
    new = _stream(changed, cache_dir=tmp_path)
    new.load_state_dict(fresh_state)
    assert new.epoch == 0
    unchanged = _stream(report, cache_dir=tmp_path)
    unchanged.load_state_dict(state)
    assert unchanged.epoch == 0 and unchanged.state.batches_consumed == 3 and unchanged.changes == []


def _consumer(ds, slots, seed: int, tmp_path) -> tuple[Consumer, PoolOrder, np.ndarray]:
    """A consumer of all of epoch 0's slots, entries interleaved as a plan lists them (permutation `p`), pool 4."""
    p = np.random.default_rng(seed).permutation(len(slots))
    consumer = Consumer(
        ds.item_layout,
        ds.entry,
        slots.entry[p],
        slots.episode[p],
        [range(n) for n in slots.length[p].tolist()],
        ds.options,
        ds.counters,
        ds.decoders,
        str(tmp_path / "mirror"),
    )
    return consumer, PoolOrder(slots.length[p].tolist(), 4, np.random.default_rng(seed)), p


def test_a_consumer_keeps_only_the_entries_of_its_pool_and_read_ahead_open(report, tmp_path):
    ds = _stream(report, cache_dir=tmp_path, prefetch_episodes=2)
    slots = ds.epoch_slots(0)
    consumer, order, _ = _consumer(ds, slots, 0, tmp_path)
    seen, most = [], 0
    for batch in iterate_consumer(consumer, order, 8, ds.counters, time.perf_counter(), lambda build: build("uint8")):
        most = max(most, len(consumer.open))
        seen += list(zip(batch["dataset_index"].tolist(), batch["index"].tolist()))
    assert Counter(seen) == _epoch_frames(ds, 0)
    assert most <= 4 + 2 and not consumer.open  # pool + read-ahead, and all closed at the end
    assert consumer.readers_opened > len(set(slots.entry.tolist()))  # entries reopened when they come back


def test_episodes_read_ahead_have_their_rows_and_video_files_before_they_are_drawn(report, tmp_path):
    """After each batch the next slots (at least half of `prefetch_episodes` past those in the pool) have their
    rows read and their video files open; the pool's own files stay open meanwhile (no reader of a pooled episode
    is closed to make room for the read-ahead)."""
    ds = _stream(report, cache_dir=tmp_path, prefetch_episodes=4)
    consumer, order, p = _consumer(ds, ds.epoch_slots(0), 1, tmp_path)
    entries, episodes = ds.epoch_slots(0).entry[p], ds.epoch_slots(0).episode[p]

    def files(k: int) -> list[str]:
        meta, spec, source = consumer.entries[int(entries[k])]
        return [source.local_path(meta.video_file_of(int(episodes[k]), key)) for key in spec.video_keys]

    batches = ahead_seen = 0
    for _ in iterate_consumer(consumer, order, 8, ds.counters, time.perf_counter(), lambda build: build("uint8")):
        batches += 1
        assert consumer.submitted >= min(order.admitted + 2, len(entries))
        pooled = [k for k in range(order.admitted) if not consumer.released[k]]
        ahead = range(order.admitted, consumer.submitted)
        for k in [*pooled, *ahead]:
            assert all(f in ds.decoders for f in files(k)), k
            reader, start, _ = consumer.open[int(entries[k])]
            assert reader.blocks[(int(consumer.local[k]) - start) // ds.options.tabular_block].done(), k
        ahead_seen += len(ahead)
    assert batches > 5 and ahead_seen > batches


def test_entries_over_http(synthetic, tmp_path):
    """Entries served over HTTP (range requests): streamed through per-entry mirrors that are removed with their
    pipelines, map-style through the whole-file cache; both give the local entries' items."""
    from support import FaultServer

    picks = [synthetic[i] for i in (0, 2, 5, 9)]  # v3.0 and v2.1
    root = picks[0].path.rsplit("/", 1)[0]
    local = mixture_spec(picks, delta_timestamps={"action": [0.0, 0.1]})
    with FaultServer(root) as server:
        remote = mixture_spec(picks, delta_timestamps={"action": [0.0, 0.1]})
        for e, d in zip(remote["entries"], picks):
            e["source"] = f"{server.url}/{d.path.rsplit('/', 1)[1]}"
        want = _stream(preflight(local), cache_dir=tmp_path / "a")
        got = _stream(preflight(remote), cache_dir=tmp_path / "b")
        a = list(want.loader(batch_size=8, num_workers=2))
        b = list(got.loader(batch_size=8, num_workers=2))
        assert _ids(a) == _ids(b)
        for x, y in zip(a, b):
            for k, v in x.items():
                assert torch.equal(y[k], v) if torch.is_tensor(v) else y[k] == v, k
        assert got.stats()["bytes_fetched"] > 0 and want.stats()["bytes_fetched"] == 0
        assert not list((tmp_path / "b" / "streaming").rglob("*.mp4"))  # every mirror went with its pipeline
        m = MixtureDataset(preflight(remote), image_size=SIZE, cache_dir=tmp_path / "c")
        flats = m.sampler.indices_at(np.arange(20), 0)
        ref = MixtureDataset(preflight(local), image_size=SIZE, cache_dir=tmp_path / "d").get_batch(flats)
        for k, v in m.get_batch(flats).items():
            assert torch.equal(ref[k], v) if torch.is_tensor(v) else ref[k] == v, k
