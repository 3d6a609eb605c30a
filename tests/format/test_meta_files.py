"""Bounds of the metadata JSON files read whole (meta_files.MAX_BYTES): a larger info.json, stats.json or jsonl file is
a DatasetFormatError naming the file, its size and the bound, read from a directory (at most the bound and a byte)
or through any reader; over HTTP the file is not fetched at all."""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from episodic.format import DatasetFormatError, load_metadata
from episodic.format.meta_files import (
    INFO_PATH,
    MAX_BYTES,
    STATS_PATH,
    V21_EPISODE_STATS,
    V21_EPISODES,
    V21_TASKS,
    read_bytes,
)
from episodic.storage import open_source
from episodic.storage.fetch import fetch_bytes

from support import FaultServer


def padded_info(root: Path, size: int) -> int:
    """info.json of `root` grown to about `size` bytes by a foreign field of tiny lists (kept, as unknown keys are);
    returns its size."""
    info = json.loads((root / INFO_PATH).read_text())
    info.pop("padding", None)
    text = json.dumps(info)
    pad = "[0]," * ((size - len(text)) // 4)
    (root / INFO_PATH).write_text(text[:-1] + ', "padding": [' + pad + "[0]]}")
    return (root / INFO_PATH).stat().st_size


@pytest.fixture()
def two(synthetic, tmp_path):
    """Writable copies of a v3.0 and a v2.1 synthetic dataset."""
    out = []
    for version in ("v3.0", "v2.1"):
        d = next(d for d in synthetic if d.version == version)
        out.append(Path(shutil.copytree(d.path, tmp_path / version)))
    return out


def test_an_info_json_past_its_bound_is_refused_at_once_in_bounded_memory(two):
    """12 MB of tiny lists (the 105 MB case took 17 s and 2.8 GB): refused naming the file, its size and the
    bound, after reading no more than the bound; a file under the bound loads, its foreign field kept."""
    root = two[0]
    size = padded_info(root, 12 << 20)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(DatasetFormatError) as e:
            load_metadata(LocalFileSystem(), str(root))
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(e.value).startswith(f"{root / INFO_PATH}: {size:,} bytes, more than the {8 << 20:,} bytes")
    assert peak < 3 * (8 << 20) and seconds < 5, (peak, seconds)  # parsed, 12 MB of lists would take ~300 MB
    padded_info(root, 1 << 18)
    assert len(load_metadata(LocalFileSystem(), str(root)).info.extra["padding"]) > 50_000


@pytest.mark.parametrize("rel", [STATS_PATH, V21_EPISODES, V21_TASKS, V21_EPISODE_STATS])
def test_every_metadata_json_file_has_a_bound(two, monkeypatch, rel):
    """stats.json, episodes.jsonl, tasks.jsonl, episodes_stats.jsonl (bounds lowered to their size less one):
    refused from the directory, and through a reader that ignores the bound (the parsers check too)."""
    root = two[1] if rel != STATS_PATH else two[0]
    if rel == V21_EPISODE_STATS:
        (root / rel).write_text(json.dumps({"episode_index": 0, "stats": {}}) + "\n")
    size = (root / rel).stat().st_size
    monkeypatch.setitem(MAX_BYTES, rel, size - 1)
    fs = LocalFileSystem()

    def whole(name: str) -> bytes:  # a reader of its own, with no bound
        return (root / name).read_bytes()

    for read in (None, whole):
        with pytest.raises(DatasetFormatError, match=f"{rel}: {size:,} bytes, more than the {size - 1:,} bytes"):
            if rel == V21_EPISODE_STATS:
                load_metadata(fs, str(root)).episode_stats(0, read)
            else:
                load_metadata(fs, str(root), read=read)
    monkeypatch.setitem(MAX_BYTES, rel, size)
    meta = load_metadata(fs, str(root))
    assert len(meta.episodes) > 0 and (rel != V21_EPISODE_STATS or meta.episode_stats(0) == {})
    assert read_bytes(fs, str(root), rel) == (root / rel).read_bytes()


def test_a_remote_info_json_past_its_bound_is_not_fetched_whole(two):
    """Over HTTP the file is asked for as the range of the bound and one byte (one request for a missing file, as
    before): a larger file is refused, naming the URL, its size and the bound, and no more of it was sent; under
    the bound, the same GET and a HEAD (the length check), as before; an empty file is not valid JSON."""
    root = two[0]
    size = padded_info(root, 9 << 20)
    limit = 8 << 20
    path = f"/{root.name}/{INFO_PATH}"
    with FaultServer(root.parent) as server:
        source = open_source(f"{server.url}/{root.name}")
        with pytest.raises(
            DatasetFormatError, match=f"{server.url}{path}: {size:,} bytes, more than the {limit:,} bytes"
        ):
            source.load_metadata()
        assert [(m, r) for m, p, r in server.requests if p == path] == [("GET", f"bytes=0-{limit}"), ("HEAD", None)]
        padded_info(root, 1 << 18)
        server.requests.clear()
        assert source.load_metadata().info.extra["padding"]
        assert [(m, r) for m, p, r in server.requests if p == path] == [("GET", f"bytes=0-{limit}"), ("HEAD", None)]
        (root / STATS_PATH).write_bytes(b"")
        with pytest.raises(DatasetFormatError, match=f"{server.url}/{root.name}/{STATS_PATH}: not valid JSON"):
            source.load_metadata()
        missing = open_source(f"{server.url}/{root.name}-nope")
        server.requests.clear()
        with pytest.raises(DatasetFormatError, match="file not found"):
            missing.load_metadata()
        assert len(server.requests) == 1


class SizelessMemory(MemoryFileSystem):
    """A filesystem that does not tell sizes (as a server without Content-Length)."""

    protocol = "sizeless"

    def info(self, path, **kwargs):
        return {k: v for k, v in super().info(path, **kwargs).items() if k != "size"}


def test_a_file_whose_size_is_not_told_is_read_up_to_the_bound():
    fs = SizelessMemory()
    fs.pipe("/d/meta/info.json", b"x" * 1001)
    with pytest.raises(DatasetFormatError, match=r"sizeless://d/meta/info.json: more than the 1,000 bytes"):
        fetch_bytes(fs, "/d/meta/info.json", "sizeless://d/meta/info.json", max_bytes=1000)
    assert fetch_bytes(fs, "/d/meta/info.json", "u", max_bytes=1001) == b"x" * 1001
    assert fsspec.filesystem("memory") is not None  # fsspec's own memory filesystem is untouched
