"""Real process groups: torchrun (gloo) on one node, two nodes on 127.0.0.1, and kill/restart."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from episodic.order import EpisodeAwareSampler

pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.timeout(180)

WORKER = Path(__file__).with_name("order_dist_worker.py")
_spec = importlib.util.spec_from_file_location("order_dist_worker", WORKER)
worker_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker_module)

EPISODES, BATCH, SEED = 20, 4, 11


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sampler():
    starts, ends = worker_module.episodes(EPISODES)
    return EpisodeAwareSampler(starts, ends, drop_n_last_frames=1, shuffle=True, seed=SEED)


def torchrun(out, nproc, *args, nnodes=1, node_rank=0, port=None):
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={port or free_port()}",
        str(WORKER),
        "--out",
        str(out),
        "--episodes",
        str(EPISODES),
        "--batch-size",
        str(BATCH),
        "--seed",
        str(SEED),
        *map(str, args),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, ok=True):
    output, _ = proc.communicate(timeout=120)
    if ok:
        assert proc.returncode == 0, output[-3000:]
    return proc.returncode


def read_ranks(out, world):
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    assert [r["rank"] for r in records] == list(range(world))
    assert all(r["world"] == world for r in records)
    assert all(r["order"] == records[0]["order"] for r in records), "ranks disagree on the order state"
    return records


def consumption(records):
    """Indices in consumption order: step-major, rank-minor."""
    steps = {len(r["batches"]) for r in records}
    assert len(steps) == 1, "ranks ran different numbers of steps"
    return [i for step in zip(*(r["batches"] for r in records)) for batch in step for i in batch]


def assert_global_prefix(indices, start=0):
    s = sampler()
    positions = (start + np.arange(len(indices))) % len(s)
    assert indices == s.indices_at(positions, 0).tolist()


def assert_exactly_once(indices):
    s = sampler()
    n = len(s)
    assert sorted(indices[:n]) == sorted(s.indices_at(np.arange(n), 0).tolist())
    assert len(indices) - n < 3 * BATCH  # padding: less than one global batch


def test_torchrun_two_processes_cover_the_epoch(tmp_path):
    finish(torchrun(tmp_path, 2, "--workers", 1))
    records = read_ranks(tmp_path, 2)
    ranks = [set(i for b in r["batches"] for i in b) for r in records]
    got = consumption(records)
    n = len(sampler())
    if len(got) == n:  # no padding: ranks are disjoint
        assert not ranks[0] & ranks[1]
    assert ranks[0] | ranks[1] == set(sampler().indices_at(np.arange(n), 0).tolist())
    assert_global_prefix(got)
    assert_exactly_once(got)
    assert records[0]["order"] == {"seed": SEED, "epoch": 1, "consumed": 0}


def test_two_nodes_on_localhost(tmp_path):
    port = free_port()
    procs = [torchrun(tmp_path, 1, nnodes=2, node_rank=node, port=port) for node in (0, 1)]
    for p in procs:
        finish(p)
    records = read_ranks(tmp_path, 2)
    got = consumption(records)
    assert_global_prefix(got)
    assert_exactly_once(got)
    n = len(sampler())
    first = [set(i for b in r["batches"] for i in b) for r in records]
    assert first[0] | first[1] == set(sampler().indices_at(np.arange(n), 0).tolist())


def test_kill_and_restart_same_and_different_world_size(tmp_path):
    stop = 3
    killed = finish(torchrun(tmp_path / "a", 2, "--workers", 2, "--stop-after", stop), ok=False)
    assert killed != 0  # the job died right after its checkpoint
    before = read_ranks(tmp_path / "a", 2)
    head = consumption(before)
    assert len(head) == stop * 2 * BATCH
    assert before[0]["order"] == {"seed": SEED, "epoch": 0, "consumed": len(head)}  # prefetch not counted
    assert_global_prefix(head)
    state = tmp_path / "a" / "rank0.json"
    for world in (2, 3):
        out = tmp_path / f"resume{world}"
        finish(torchrun(out, world, "--state-in", state))
        tail = consumption(read_ranks(out, world))
        assert_global_prefix(tail, start=len(head))
        assert_exactly_once(head + tail)
