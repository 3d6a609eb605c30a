"""Checks shared by the fleet tools' tests: items of two datasets compared (map-style `episodic.LeRobotDataset`, every
key, torch.equal), a dataset's files fingerprinted (to prove a source untouched), and LeRobot 0.4.4's own
fixture laid out as v2.1 by code written here (PyAV and pyarrow directly: each episode's packets and rows into
its own files), so that `convert` meets LeRobot-written frames and rows in the v2.1 layout."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq

from episodic import LeRobotDataset

from support import assert_items_equal


def items_equal(a: Path | str, b: Path | str, every: int = 1, windows: bool = True) -> int:
    """Every `every`-th item of `a` equals `b`'s (and, with `windows`, items with past and future windows on
    every camera and the action); returns the number compared."""
    da = LeRobotDataset("a", root=a, return_uint8=True)
    db = LeRobotDataset("b", root=b, return_uint8=True)
    assert len(da) == len(db) and da.meta.camera_keys == db.meta.camera_keys
    idx = sorted(
        set(range(0, len(da), every))
        | set(da.meta.episodes["dataset_from_index"].tolist())
        | set((da.meta.episodes["dataset_to_index"] - 1).tolist())
    )
    for i in idx:
        assert_items_equal(da[i], db[i])
    if windows:
        fps = da.meta.fps
        dt = {k: [-2 / fps, 0.0, 3 / fps] for k in da.meta.camera_keys}
        dt["action"] = [0.0, 1 / fps, 5 / fps]
        da = LeRobotDataset("a", root=a, return_uint8=True, delta_timestamps=dt)
        db = LeRobotDataset("b", root=b, return_uint8=True, delta_timestamps=dt)
        for i in idx[::3]:
            assert_items_equal(da[i], db[i])
    return len(idx)


def tree_digest(root: Path | str) -> dict[str, str]:
    """Every file under `root` -> SHA-1 of its bytes and its mtime."""
    root = Path(root)
    return {
        str(p.relative_to(root)): f"{hashlib.sha1(p.read_bytes()).hexdigest()}:{p.stat().st_mtime_ns}"
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def as_v21(src: Path, dst: Path) -> Path:
    """The v3.0 dataset `src` (every episode of its mp4s starting at a key frame, as LeRobot writes them) in the
    v2.1 layout at `dst`: one parquet and one mp4 per episode (packets copied, times from 0), jsonl metadata,
    per-episode statistics in episodes_stats.jsonl."""
    info = json.loads((src / "meta/info.json").read_text())
    fps = info["fps"]
    eps = pq.read_table(src / "meta/episodes/chunk-000/file-000.parquet")
    for extra in sorted((src / "meta/episodes").rglob("*.parquet"))[1:]:
        eps = pa.concat_tables([eps, pq.read_table(extra)])
    eps = eps.sort_by("episode_index").to_pylist()
    cameras = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    dst.mkdir(parents=True)
    data = pa.concat_tables([pq.read_table(p) for p in sorted((src / "data").rglob("*.parquet"))])
    ep_col = data.column("episode_index").to_numpy()
    for row in eps:
        e = row["episode_index"]
        chunk = e // info["chunks_size"]
        out = dst / f"data/chunk-{chunk:03d}/episode_{e:06d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data.filter(pa.array(ep_col == e)), out)
        for key in cameras:
            path = src / info["video_path"].format(
                video_key=key, chunk_index=row[f"videos/{key}/chunk_index"], file_index=row[f"videos/{key}/file_index"]
            )
            target = dst / f"videos/chunk-{chunk:03d}/{key}/episode_{e:06d}.mp4"
            target.parent.mkdir(parents=True, exist_ok=True)
            _cut(path, target, row[f"videos/{key}/from_timestamp"], row["length"], fps)
    (dst / "meta").mkdir()
    (dst / "meta/episodes.jsonl").write_text(
        "".join(
            json.dumps({"episode_index": r["episode_index"], "tasks": r["tasks"], "length": r["length"]}) + "\n"
            for r in eps
        )
    )
    stats_rows = []
    for r in eps:
        stats: dict = {}
        for name, value in r.items():
            if name.startswith("stats/"):
                _, feat, stat = name.split("/", 2)
                stats.setdefault(feat, {})[stat] = value
        stats_rows.append({"episode_index": r["episode_index"], "stats": stats})
    (dst / "meta/episodes_stats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stats_rows))
    tasks = pq.read_table(src / "meta/tasks.parquet").to_pylist()
    (dst / "meta/tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": t["task_index"], "task": t["__index_level_0__"]}) + "\n" for t in tasks)
    )
    shutil.copy(src / "meta/stats.json", dst / "meta/stats.json")
    info.update(
        codebase_version="v2.1",
        total_chunks=-(-len(eps) // info["chunks_size"]),
        total_videos=len(cameras) * len(eps),
        data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
    )
    for k in ("data_files_size_in_mb", "video_files_size_in_mb"):
        info.pop(k)
    (dst / "meta/info.json").write_text(json.dumps(info, indent=2))
    return dst


def _cut(path: Path, target: Path, start: float, length: int, fps: int) -> None:
    """The packets of one episode (shown from `start` for `length` frames) into their own mp4, times from 0."""
    with av.open(str(path)) as inp, av.open(str(target), "w", format="mp4") as out:
        ist = inp.streams.video[0]
        ost = out.add_stream_from_template(ist, opaque=True)
        ost.time_base = ist.time_base
        lo, hi = (start - 0.5 / fps) / ist.time_base, (start + (length - 0.5) / fps) / ist.time_base
        first = None
        for p in inp.demux(ist):
            if p.dts is None or not lo <= p.pts < hi:
                continue
            if first is None:
                assert p.is_keyframe, f"{path}: an episode that does not start at a key frame"
                first = p.pts
            p.pts -= first
            p.dts -= first
            p.stream = ost
            out.mux(p)


def data_row_groups(root: Path) -> list[list[int]]:
    """Each data file's row group sizes (rows), in file order."""
    return [
        [pq.ParquetFile(p).metadata.row_group(g).num_rows for g in range(pq.ParquetFile(p).metadata.num_row_groups)]
        for p in sorted(Path(root).glob("data/*/*.parquet"))
    ]


class CrashingTask:
    """A task whose process dies (as a crash in native code would) on the dataset named ``crash``, and that does
    nothing on the others."""

    name = "crashing"

    def options(self, raw: dict) -> dict:
        return raw

    def output(self, out_root: str, name: str) -> str:
        return f"{out_root}/{name}"

    def run(self, item: dict, options: dict, progress: bool = False) -> dict:
        import os

        if item["name"] == "crash":
            os._exit(3)
        return {"status": "done", "detail": "nothing to do"}


CRASHING = CrashingTask()


def make_list(path: Path, sources: list) -> Path:
    """A list file of `sources`, one per line, with a comment and a blank line."""
    path.write_text("# datasets\n\n" + "".join(f"{s}\n" for s in sources))
    return path
