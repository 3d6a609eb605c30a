"""`episodic convert` / `repack` (tools/fleet/relayout.py) on datasets written by episodic's writer (v3.0, and v2.1)
and by LeRobot 0.4.4 (v3.0 as it wrote them, and its frames and rows laid out as v2.1): every item of the new
dataset equals the original's (map-style items, every key, torch.equal: frames are packets copied), whether
the files are merged or split; statistics and tasks carried over; the source untouched; row groups, file sizes
and chunk directories as asked."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodic import LeRobotDataset
from episodic.format.errors import DatasetFormatError, MissingFileError, RelayoutError, WriterLockedError
from episodic.storage import open_source
from episodic.storage.atomic import temp_files
from episodic.tools.fleet.relayout import DONE_RECORD, STAGING, relayout
from episodic.tools.fleet.relayout_plan import RelayoutOptions
from episodic.writer.lock import DirectoryLock

from fleet_checks import data_row_groups, items_equal, tree_digest
from support import FIXTURES, LEROBOT_FIXTURE

MERGE = RelayoutOptions()  # the defaults: everything of these small datasets in one file per kind
SPLIT = RelayoutOptions(data_file_mb=0.002, video_file_mb=0.004, chunks_size=2, row_group_mb=0.001)


def _sources(request) -> Path:
    which = request.param
    if which == "episodic-v3":
        return request.getfixturevalue("multifile_root")
    if which == "episodic-v2.1":
        return Path(request.getfixturevalue("synthetic")[6].path)
    if which == "lerobot-v2.1":
        return request.getfixturevalue("lerobot_v21")
    return FIXTURES / which / "dataset"


@pytest.fixture(
    params=["episodic-v3", "episodic-v2.1", "lerobot-0.4.4", "lerobot_h264", "lerobot_multifile_av1", "lerobot-v2.1"]
)
def source(request) -> Path:
    return _sources(request)


@pytest.mark.parametrize("options", [MERGE, SPLIT], ids=["merge", "split"])
def test_items_equal_the_originals(source, options, tmp_path):
    before = tree_digest(source)
    out = tmp_path / "new"
    tool = "convert" if json.loads((source / "meta/info.json").read_text())["codebase_version"] != "v3.0" else "repack"
    result = relayout(open_source(source), str(out), options, tool=tool)
    assert result["status"] == "done"
    items_equal(source, out, every=7 if source == LEROBOT_FIXTURE / "dataset" else 1)
    a, b = LeRobotDataset("a", root=source), LeRobotDataset("b", root=out)
    assert a.meta.tasks == b.meta.tasks and a.meta.total_episodes == b.meta.total_episodes
    assert a.meta.stats.keys() == b.meta.stats.keys()
    for key, stats in a.meta.stats.items():
        for name, value in stats.items():
            assert np.array_equal(value, b.meta.stats[key][name]), (key, name)
    for e in range(a.meta.total_episodes):
        try:
            sa = a.meta.episode_stats(e)
        except MissingFileError:  # a v2.1 dataset without per-episode statistics: none carried over
            sa = {}
        sb = b.meta.episode_stats(e)
        assert sa.keys() == sb.keys() and all(np.allclose(sa[k][s], sb[k][s]) for k in sa for s in sa[k])
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and "total_chunks" not in info
    assert info["chunks_size"] == options.chunks_size
    assert tree_digest(source) == before  # the source is only read
    assert not (out / STAGING).exists() and not temp_files(out)


def test_items_of_the_split_lerobot_dataset_equal_lerobots_own(tmp_path):
    """An independent reference: LeRobot 0.4.4's own items (tests/fixtures, items_plain.npz) of its dataset,
    against the repacked copy (frames within LeRobot's float conversion, 2/255; everything else exactly)."""
    out = tmp_path / "new"
    relayout(open_source(LEROBOT_FIXTURE / "dataset"), str(out), SPLIT)
    ref = np.load(LEROBOT_FIXTURE / "items_plain.npz")
    ds = LeRobotDataset("x", root=out)
    assert len(list(out.glob("videos/*/*/*.mp4"))) > 10  # really split
    for j, i in enumerate(ref["indices"]):
        item = ds[int(i)]
        for key in [k.split("/", 1)[1] for k in ref.keys() if k.startswith(f"{j}/")]:
            want, got = ref[f"{j}/{key}"], item[key]
            if key == "task":
                assert got == str(want)
            elif key in ds.meta.camera_keys:
                assert np.abs(got.numpy() * 255 - want).max() <= 2
            else:
                assert np.array_equal(got.numpy(), want), key


def test_lerobot_frames_in_the_v21_layout_convert_to_its_own_items(lerobot_v21, tmp_path):
    """LeRobot's v3.0 fixture, laid out as v2.1 by this test's own code, converted back: items equal the items of
    LeRobot's original v3.0 dataset."""
    out = tmp_path / "new"
    relayout(open_source(lerobot_v21), str(out), MERGE, tool="convert")
    assert items_equal(FIXTURES / "lerobot_multifile_av1/dataset", out) == 450
    assert len(list(out.glob("videos/*/*/*.mp4"))) == 2 and len(list(lerobot_v21.glob("videos/*/*/*.mp4"))) == 24


def test_row_groups_files_and_chunk_directories(multifile_root, tmp_path):
    src_groups = data_row_groups(multifile_root)
    out = tmp_path / "new"
    lengths = LeRobotDataset("x", root=multifile_root).meta.episodes["length"]
    relayout(
        open_source(multifile_root),
        str(out),
        RelayoutOptions(data_file_mb=1, video_file_mb=1, row_group_mb=0.02, chunks_size=2),
    )
    groups = data_row_groups(out)
    assert len(groups) == 1 < len(src_groups)  # many small data files into one
    assert len(groups[0]) < len(lengths)  # several episodes per row group ...
    assert set(np.cumsum(groups[0]).tolist()) <= set(np.cumsum(lengths).tolist())  # ... whole ones
    md = pq.ParquetFile(next(out.glob("data/*/*.parquet"))).metadata
    for g in range(md.num_row_groups):
        assert md.row_group(g).column(0).has_offset_index and md.row_group(g).column(0).has_column_index
        rg = md.row_group(g)
        assert sum(rg.column(c).total_compressed_size for c in range(rg.num_columns)) < 0.02 * 2**20 * 1.5
    pieces = tmp_path / "pieces"  # an episode larger than the target: split into row groups of about it
    relayout(open_source(multifile_root), str(pieces), RelayoutOptions(row_group_mb=0.0002))
    groups = data_row_groups(pieces)[0]
    assert len(groups) > len(lengths) and sum(groups) == int(lengths.sum())
    items_equal(multifile_root, pieces)
    split = tmp_path / "split"
    relayout(open_source(multifile_root), str(split), SPLIT)
    for kind in ("data", "videos/observation.images.top"):
        chunks = sorted((split / kind).glob("chunk-*"))
        assert len(chunks) > 1 and all(len(list(c.iterdir())) <= 2 for c in chunks)


def test_a_finished_result_is_skipped_and_a_changed_one_redone(small_root, tmp_path, copy_of):
    src = copy_of(small_root)
    out = tmp_path / "new"
    assert relayout(open_source(src), str(out), MERGE)["status"] == "done"
    record = json.loads((out / DONE_RECORD).read_text())
    assert record["tool"] == "repack" and set(record["files"]) >= {"meta/info.json", "data/chunk-000/file-000.parquet"}
    stamp = (out / "meta/info.json").stat().st_mtime_ns
    assert relayout(open_source(src), str(out), MERGE)["status"] == "skipped"
    assert (out / "meta/info.json").stat().st_mtime_ns == stamp  # nothing rewritten
    (out / "data/chunk-000/file-000.parquet").unlink()  # a result damaged: not verified, written again
    assert relayout(open_source(src), str(out), MERGE)["status"] == "done"
    assert relayout(open_source(src), str(out), SPLIT)["status"] == "done"  # other options: written again
    assert not (out / "data/chunk-000/file-000.parquet").exists() or len(list(out.glob("data/*/*"))) > 1
    os.utime(next(src.glob("data/*/*.parquet")), ns=(1, 1))  # the source changed
    assert relayout(open_source(src), str(out), SPLIT)["status"] == "done"
    assert relayout(open_source(src), str(out), SPLIT, tool="convert")["status"] == "done"  # another tool's
    items_equal(src, out)


def test_directories_that_are_not_its_own_are_refused(small_root, tmp_path, copy_of):
    src = copy_of(small_root)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RelayoutError, match="not empty and not a dataset written by episodic repack"):
        relayout(open_source(src), str(foreign), MERGE)
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    before = tree_digest(src)
    for inside in (src, src / "new", src.parent):
        with pytest.raises(RelayoutError, match="must lie outside the source"):
            relayout(open_source(src), str(inside), MERGE)
    assert tree_digest(src) == before


def test_a_directory_in_use_is_refused(small_root, tmp_path):
    out = tmp_path / "new"
    (out / STAGING).mkdir(parents=True)
    lock = DirectoryLock.acquire(str(out / STAGING / "lock"), str(out))
    try:
        with pytest.raises(WriterLockedError, match="another writer"):
            relayout(open_source(small_root), str(out), MERGE)
    finally:
        lock.release()
    assert relayout(open_source(small_root), str(out), MERGE)["status"] == "done"


def test_a_run_whose_session_directory_goes_before_its_lock_finds_the_dataset_finished(
    small_root, tmp_path, monkeypatch
):
    """Another run finishes the same dataset between this run's look at the directory and its lock, removing the
    session directory this run had just made: this run makes it again, finds the dataset finished and verified
    (`skipped`) and leaves no session directory (it used to fail with FileNotFoundError on the lock file)."""
    from episodic.tools.fleet import relayout as R

    out = tmp_path / "new"
    assert relayout(open_source(small_root), str(out), MERGE)["status"] == "done"
    before = tree_digest(out)
    (out / DONE_RECORD).rename(tmp_path / "record")  # as it was before the other run's last steps ...
    (out / STAGING).mkdir()
    real, calls = DirectoryLock.acquire, []

    def acquire(path, what):
        if not calls:  # ... which come now: its record written, its session directory removed
            (tmp_path / "record").rename(out / DONE_RECORD)
            shutil.rmtree(out / STAGING)
        calls.append(path)
        return real(path, what)

    monkeypatch.setattr(R.DirectoryLock, "acquire", acquire)
    assert relayout(open_source(small_root), str(out), MERGE)["status"] == "skipped"
    assert len(calls) == 2 and not (out / STAGING).exists() and tree_digest(out) == before


def test_a_source_whose_rows_disagree_with_its_metadata_is_named(small_root, tmp_path, copy_of):
    src = copy_of(small_root)
    path = next(src.glob("data/*/*.parquet"))
    table = pq.read_table(path)
    keep = np.ones(table.num_rows, bool)
    keep[np.flatnonzero(table.column("episode_index").to_numpy() == 2)[-1]] = False  # episode 2 one row short
    pq.write_table(table.filter(keep), path)
    with pytest.raises(
        DatasetFormatError,
        match=r"file-000\.parquet: episode 2: \d+ rows with this episode_index, "
        r"the metadata says length",
    ):
        relayout(open_source(src), str(tmp_path / "new"), MERGE)
    shutil.rmtree(src / "videos/observation.images.top")
    with pytest.raises(DatasetFormatError, match=r"observation\.images\.top.*file not found"):
        relayout(open_source(src), str(tmp_path / "other"), MERGE)


def test_a_killed_run_is_continued_by_the_next(multifile_root, tmp_path):
    """SIGKILL a real run after some of its files are written: nothing of it is taken for a dataset, and the next
    run keeps the finished files, drops the partial one and ends with every item equal."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "new"
    child = Path(__file__).with_name("relayout_child.py")
    proc = subprocess.Popen(
        [sys.executable, str(child), str(multifile_root), str(out), json.dumps(SPLIT.to_json()), "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    journal = out / STAGING / "files.jsonl"
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 3) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "meta/info.json").exists() and not (out / DONE_RECORD).exists()
    finished = journal.read_bytes().count(b"\n")
    result = relayout(open_source(multifile_root), str(out), SPLIT)
    assert result["status"] == "done" and result["kept_files"] >= finished >= 3
    items_equal(multifile_root, out)
    assert not (out / STAGING).exists() and not temp_files(out)
    assert relayout(open_source(multifile_root), str(out), SPLIT)["status"] == "skipped"


def test_a_remote_source_over_http(multifile_root, tmp_path):
    """A source read over HTTP (the tests' server on 127.0.0.1): its files fetched through the fetch policy into the
    cache, the result's items equal the original's, and a run again finds it done (the source's version tokens)."""
    from episodic.storage.cache import FileCache

    from support import FaultServer

    with FaultServer(multifile_root.parent) as server:
        url = f"{server.url}/{multifile_root.name}"
        cache = FileCache(tmp_path / "cache")
        result = relayout(open_source(url, cache=cache), str(tmp_path / "new"), SPLIT)
        assert result["status"] == "done" and server.served() > 0
        assert relayout(open_source(url, cache=cache), str(tmp_path / "new"), SPLIT)["status"] == "skipped"
        assert json.loads((tmp_path / "new" / DONE_RECORD).read_text())["source"] == url
    items_equal(multifile_root, tmp_path / "new")
