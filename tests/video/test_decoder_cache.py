"""The decoder cache: bounded, counted, demoting, pickled empty, sized per process within its memory budget."""

from __future__ import annotations

from episodic.video import DecoderCache

from support import LEROBOT_FIXTURE

VIDEO = LEROBOT_FIXTURE / "dataset/videos/observation.images.top/chunk-000/file-000.mp4"


def test_decoder_cache_is_bounded_and_counts():
    cache = DecoderCache(max_open=1)
    a = cache.get(str(VIDEO))
    assert cache.get(str(VIDEO)) is a
    other = str(VIDEO).replace("observation.images.top", "observation.images.wrist")
    cache.get(other)
    assert cache.stats() == {"hits": 1, "misses": 2, "evictions": 1, "hit_rate": 1 / 3, "open": 1}


def test_a_demoted_reader_is_the_first_closed(tmp_path):
    """A streaming consumer demotes the reader of a file no pooled episode reads any more: the next file opened
    with the cache full closes it, not the least recently used reader (a pooled episode not drawn from lately)."""
    import shutil

    paths = [str(VIDEO), str(VIDEO).replace("observation.images.top", "observation.images.wrist")]
    paths.append(str(shutil.copy(VIDEO, tmp_path / "third.mp4")))
    cache = DecoderCache(max_open=2)
    first, second = cache.get(paths[0]), cache.get(paths[1])
    cache.demote(paths[1])
    cache.demote(str(tmp_path / "never-opened.mp4"))  # not open: nothing to do
    cache.get(paths[2])
    assert cache.get(paths[0]) is first  # kept, though least recently used
    assert cache.stats()["evictions"] == 1 and cache.get(paths[1]) is not second  # the demoted one was closed


def test_a_decoder_cache_pickles_empty(tmp_path):
    """A dataset used in the main process is pickled for spawned DataLoader workers: its cache of open
    decoders (FFmpeg objects) travels empty."""
    import pickle

    cache = DecoderCache(max_open=3)
    cache.get(str(VIDEO))
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.max_open == 3 and copy.stats()["open"] == 0 and cache.stats()["open"] == 1
    assert len(copy.get(str(VIDEO)).index) == len(cache.get(str(VIDEO)).index)


class _WorkerSizes:
    """A dataset whose items are the decoder cache size each DataLoader worker takes from its rule."""

    def __init__(self, cache):
        self.cache = cache

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.cache.max_open


def test_the_decoder_budget_is_a_share_of_the_machine_sized_in_each_process(monkeypatch):
    """By default the open readers of every process loading data on a machine may take an eighth of its memory
    together (at least 512 MB each): a DataLoader worker sizes its cache from its rule when it runs, as one of
    num_workers (times $LOCAL_WORLD_SIZE ranks), not with the main process's share."""
    import torch

    from episodic import runtime
    from episodic.video.decoder_cache import CacheRule

    monkeypatch.setattr(runtime, "usable_memory", lambda: 64 << 30)  # 8 GB for decoders in all
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    files = ((480, 640, 100_000),)  # 256 KB each (estimate: demuxer and index, no pictures): want ~25 GB
    per_reader = 256 << 10
    rule = CacheRule(files)
    assert rule.size() == (8 << 30) // per_reader  # the main process alone
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert rule.size() == (2 << 30) // per_reader
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")  # 128 MB each: the 512 MB floor
    assert rule.size() == (512 << 20) // per_reader
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cache = DecoderCache(max_open=rule)
    assert cache.max_open == (4 << 30) // per_reader  # sized when first asked, in this process
    loader = torch.utils.data.DataLoader(_WorkerSizes(cache), batch_size=None, num_workers=2)
    assert [int(x) for x in loader] == [(2 << 30) // per_reader] * 4  # each worker: 8 GB / (2 ranks x 2 workers)
    assert DecoderCache(max_open=rule, counters=None).max_open == cache.max_open
    fixed = DecoderCache(max_open=7)
    assert [int(x) for x in torch.utils.data.DataLoader(_WorkerSizes(fixed), batch_size=None, num_workers=2)] == [7] * 4
