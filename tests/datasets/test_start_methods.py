"""DataLoader workers under every start method (fork, spawn, forkserver) hand out the items of 0 workers, map-style,
streaming and in a mixture; no thread of episodic's is alive when the process forks them (Python >= 3.12 warns
"This process is multi-threaded, use of fork() may lead to deadlocks in the child"); and a script whose spawned,
persistent workers share through the file system ends by itself (torch_shm_manager inherits no pipe of theirs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from episodic import LeRobotDataset, StreamingLeRobotDataset
from episodic.datasets.mixture import MixtureDataset
from episodic.mixture import MixtureSpec

from support import FaultServer

METHODS = ["fork", "spawn", "forkserver"]
OURS = ("episodic", "fsspecIO")  # the threads of episodic (decode pool, ...) and fsspec's event loop


def _items(loader) -> dict:
    """{key: item}, key = (dataset_index, index) for a mixture, index otherwise; items as numpy arrays."""
    out = {}
    for batch in loader:
        n = len(batch["index"])
        for j in range(n):
            key = (
                (int(batch["dataset_index"][j]), int(batch["index"][j]))
                if "dataset_index" in batch
                else int(batch["index"][j])
            )
            assert key not in out, f"{key} handed out twice"
            out[key] = {k: (v[j] if isinstance(v, list) else v[j].numpy()) for k, v in batch.items()}
    return out


def _assert_same(want: dict, got: dict) -> None:
    assert sorted(got) == sorted(want)
    for key, item in want.items():
        assert list(got[key]) == list(item), key
        for k, v in item.items():
            if isinstance(v, str):
                assert got[key][k] == v, (key, k)
            else:
                assert got[key][k].dtype == v.dtype and np.array_equal(got[key][k], v), (key, k)


def _ours(threads_at_fork: list[list[str]]) -> list[str]:
    return sorted({n for names in threads_at_fork for n in names if n.startswith(OURS)})


def _mixture(root: Path, tmp_path: Path) -> MixtureDataset:
    entries = [{"source": str(root), "name": f"part{k}", "episodes": eps} for k, eps in enumerate([[0, 2, 4], [1, 3]])]
    return MixtureDataset(MixtureSpec.from_dict({"entries": entries}), cache_dir=tmp_path)


def _loader(mode: str, root: Path, tmp_path: Path, workers: int, method: str | None):
    kw = {"num_workers": workers}
    if workers:
        kw["multiprocessing_context"] = method
    if mode == "map":  # a plain DataLoader, as LeRobot's training script builds it
        ds = LeRobotDataset("x", root=root, delta_timestamps={"action": [0.0, 1 / 30]})
        ds[0]  # decoded in this process first: its decode threads exist before the workers start
        return torch.utils.data.DataLoader(ds, batch_size=5, persistent_workers=bool(workers), **kw)
    if mode == "streaming":
        ds = StreamingLeRobotDataset("x", root=root, cache_dir=tmp_path / f"s{workers}", shuffle=True, seed=3)
        return ds.loader(batch_size=5, **kw)
    ds = _mixture(root, tmp_path)
    ds[0]
    return torch.utils.data.DataLoader(ds, batch_size=5, **kw)


@pytest.mark.parametrize("mode", ["map", "streaming", "mixture"])
@pytest.mark.parametrize("method", METHODS)
def test_workers_of_every_start_method_hand_out_the_items_of_0_workers(
    small_root, tmp_path, method, mode, threads_at_fork
):
    want = _items(_loader(mode, small_root, tmp_path, 0, None))
    got = _items(_loader(mode, small_root, tmp_path, 2, method))
    _assert_same(want, got)
    if method == "fork":
        assert threads_at_fork, "the workers were not forked from this process"
    assert _ours(threads_at_fork) == [], threads_at_fork


def test_no_decode_thread_is_alive_at_a_fork_and_decoding_goes_on_after(small_root, threads_at_fork):
    ds = LeRobotDataset("x", root=small_root)
    want = ds.get_batch(np.arange(10))["observation.images.top"].clone()
    import threading

    assert [t for t in threading.enumerate() if t.name.startswith("episodic-decode")], (
        "the test needs decode threads: a batch of two cameras decodes on the pool"
    )
    pid = os.fork()
    if pid == 0:  # the child decodes too (its own pool), then leaves at once
        ok = False
        try:
            torch.set_num_threads(1)  # as in a DataLoader worker: torch's OpenMP pool does not survive a fork
            ok = np.array_equal(ds.get_batch(np.arange(10))["observation.images.top"].numpy(), want.numpy())
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _ours(threads_at_fork) == []
    assert torch.equal(ds.get_batch(np.arange(10))["observation.images.top"], want)  # the parent decodes again


def test_fsspec_loop_is_paused_at_a_fork_and_runs_on_after(small_root, tmp_path, threads_at_fork):
    """A dataset over HTTP (fsspec's event loop thread runs) read by forked workers: the loop's thread is not alive
    at the fork, and the parent goes on reading through the same filesystem afterwards."""
    with FaultServer(small_root.parent, ranges=False) as server:
        url = f"{server.url}/{small_root.name}"
        ds = LeRobotDataset("x", root=url, cache_dir=tmp_path / "cache")
        want = {k: v for k, v in ds[7].items()}
        import fsspec.asyn

        assert fsspec.asyn.iothread[0] is not None and fsspec.asyn.iothread[0].is_alive()
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="fork")
        got = _items(loader)
        assert len(got) == len(ds)
        assert _ours(threads_at_fork) == [], threads_at_fork
        assert fsspec.asyn.iothread[0].is_alive()  # the loop runs again in the parent
        fresh = LeRobotDataset("x", root=url, cache_dir=tmp_path / "cache2")  # new reads through the same loop
        assert torch.equal(fresh[7]["observation.images.top"], want["observation.images.top"])
        assert np.array_equal(got[7]["action"], want["action"].numpy())


CHILD = Path(__file__).with_name("spawn_exit_child.py")


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawned_persistent_workers_sharing_through_the_file_system_end_by_themselves(small_root, tmp_path, method):
    """LeRobot 0.6's training loop: spawn, persistent workers, prefetch_factor 4, file-system sharing. The script
    must end by itself (it waited for ever at exit on Python 3.13: torch_shm_manager held the resource tracker's
    pipe), and no torch_shm_manager may hold the resource tracker's or a worker's sentinel pipe (on any Python:
    that cost 5 s per worker at each shutdown)."""
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(small_root), method, str(out)], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["items"] == 2 * len(LeRobotDataset("x", root=small_root))
    assert report["managers"] >= 1, "no torch_shm_manager: the workers did not share through the file system"
    assert report["held"] == [], f"torch_shm_manager holds pipes of the loader: {report['held']}"
