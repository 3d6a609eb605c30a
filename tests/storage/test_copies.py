"""Local copies of remote datasets (storage/copies.py) against a real HTTP server on 127.0.0.1: the metadata and the
files asked for fetched once, then judged present from the disk alone (no request at all); a dataset re-published
with other metadata fetched again; a torn journal line, a truncated file, a copy of another URL."""

from __future__ import annotations

import json
import shutil

import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.format import DatasetFormatError, load_metadata
from episodic.storage import FetchPolicy, open_source
from episodic.storage.cache import copy_dir
from episodic.storage.copies import DatasetCopy, metadata_fingerprint

from support import FaultServer

pytest.importorskip("aiohttp")

POLICY = FetchPolicy(backoff_s=0.001, max_backoff_s=0.01, retry_window_s=2, timeout_s=5, connect_timeout_s=5)


@pytest.fixture()
def remote(small_root, tmp_path):
    """A writable copy of `small_root` served over HTTP: (server, URL, its directory)."""
    root = tmp_path / "served" / "ds"
    shutil.copytree(small_root, root)
    with FaultServer(root.parent) as srv:
        yield srv, f"{srv.url}/ds", root


def _files(root) -> list[str]:
    meta = load_metadata(LocalFileSystem(), str(root))
    return list(
        dict.fromkeys(
            [meta.data_file_of(e) for e in range(meta.total_episodes)]
            + [meta.video_file_of(e, k) for e in range(meta.total_episodes) for k in meta.video_keys]
        )
    )


def test_fetched_once_then_present_without_a_request(remote, tmp_path):
    srv, url, root = remote
    source = open_source(url, policy=POLICY)
    fingerprint = metadata_fingerprint(source.load_metadata())
    copy = DatasetCopy(source, tmp_path / "copy")
    assert not copy.meta_current(fingerprint)
    rels = _files(root)
    assert copy.missing(rels) == rels

    copy.fetch_meta(fingerprint)
    assert copy.meta_current(fingerprint)
    local = load_metadata(LocalFileSystem(), str(copy.directory))  # the copy is a dataset (its metadata, for now)
    assert metadata_fingerprint(local) == fingerprint
    for rel in rels:
        assert copy.fetch_file(rel) == (root / rel).stat().st_size
        assert (copy.directory / rel).read_bytes() == (root / rel).read_bytes()
    assert all(srv.served(f"/ds/{rel}") == 1 for rel in rels)

    n = len(srv.requests)
    fresh = DatasetCopy(open_source(url, policy=POLICY), tmp_path / "copy")  # another process, say
    assert fresh.meta_current(fingerprint) and fresh.missing(rels) == []
    assert len(srv.requests) == n  # decided from the disk alone

    # a file cut short on disk, a torn last line in the journal: missing again, nothing else
    with open(copy.directory / rels[0], "r+b") as f:
        f.truncate(10)
    with open(copy.directory / ".episodic-copy" / "files.jsonl", "a") as f:
        f.write('{"path": "' + rels[-1])
    assert fresh.missing(rels) == [rels[0]]
    fresh.fetch_file(rels[0])
    assert fresh.missing(rels) == [] and srv.served(f"/ds/{rels[0]}") == 2


def test_other_metadata_is_fetched_again_and_the_files_with_it(remote, tmp_path):
    srv, url, root = remote
    source = open_source(url, policy=POLICY)
    old = metadata_fingerprint(source.load_metadata())
    copy = DatasetCopy(source, tmp_path / "copy")
    copy.fetch_meta(old)
    rels = _files(root)
    for rel in rels:
        copy.fetch_file(rel)
    info = json.loads((root / "meta" / "info.json").read_text())  # re-published: other metadata
    info["robot_type"] = "another_robot"
    (root / "meta" / "info.json").write_text(json.dumps(info))
    new = metadata_fingerprint(open_source(url, policy=POLICY).load_metadata())
    assert new != old and not copy.meta_current(new)
    with pytest.raises(DatasetFormatError, match=r"/ds: the dataset's metadata changed since it was checked"):
        copy.fetch_meta(old)  # what was checked is not what the server has now
    copy.fetch_meta(new)
    assert copy.meta_current(new) and copy.missing(rels) == rels  # older files are not trusted
    assert json.loads((copy.directory / "meta" / "info.json").read_text())["robot_type"] == "another_robot"


def test_metadata_read_already_is_written_without_a_request(remote, tmp_path):
    """`fetch_meta(files=...)`: the metadata files a preflight read (bytes, or the error of an optional file that is
    not there) are written as they are; only a file not among them is asked for. Bytes that do not give the
    fingerprint checked are refused."""
    from episodic.format.errors import MissingFileError
    from episodic.mixture.checking.entry_sources import fetch_entry
    from episodic.mixture.checking.spec import MixtureEntry

    srv, url, root = remote
    got = fetch_entry(MixtureEntry(source=url), keep_files=True)
    assert got.meta is not None and "meta/info.json" in got.files
    fingerprint = metadata_fingerprint(got.meta)
    n = len(srv.requests)
    copy = DatasetCopy(got.source, tmp_path / "copy")
    copy.fetch_meta(fingerprint, got.files)
    assert len(srv.requests) == n and copy.meta_current(fingerprint)
    for rel, data in got.files.items():
        if isinstance(data, bytes):
            assert (copy.directory / rel).read_bytes() == data == (root / rel).read_bytes()
        else:
            assert isinstance(data, MissingFileError) and not (copy.directory / rel).exists()

    stale = dict(got.files)
    info = json.loads(stale["meta/info.json"])
    info["robot_type"] = "another_robot"
    stale["meta/info.json"] = json.dumps(info).encode()
    with pytest.raises(DatasetFormatError, match="the dataset's metadata changed since it was checked"):
        DatasetCopy(got.source, tmp_path / "copy2").fetch_meta(fingerprint, stale)
    partial = {k: v for k, v in got.files.items() if k != "meta/info.json"}
    DatasetCopy(got.source, tmp_path / "copy3").fetch_meta(fingerprint, partial)
    assert srv.gets("/ds/meta/info.json") == 2 and len(srv.requests) == n + 2  # that one file: its GET and size


def test_where_copies_live(tmp_path, small_root):
    a = copy_dir("http://h/x/ds", tmp_path)
    assert a == copy_dir("http://h/x/ds/", tmp_path) and a.parent == tmp_path and a.name.startswith("ds-")
    assert len({a, copy_dir("http://h/y/ds", tmp_path), copy_dir("s3://h/x/ds", tmp_path)}) == 3
    assert copy_dir("http://h/..", tmp_path).parent == tmp_path  # URL text never leaves the base
    with pytest.raises(ValueError, match="needs no copy"):
        DatasetCopy(open_source(small_root))
