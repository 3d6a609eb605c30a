"""examples/stream_train.py for real: two torchrun "nodes" on 127.0.0.1 training under DDP, a checkpoint,
a resume on one process that finishes the epoch, and the same script under accelerate."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from episodic.demo import write_demo_dataset

pytestmark = pytest.mark.timeout(240)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stream_train.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, *, nnodes=1, node_rank=0, nproc=1, port=None, torchrun=True):
    cmd = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nnodes}",
            f"--node_rank={node_rank}",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={port or free_port()}",
        ]
        if torchrun
        else [sys.executable]
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [*cmd, str(EXAMPLE), *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc) -> str:
    out, _ = proc.communicate(timeout=200)
    assert proc.returncode == 0, out[-4000:]
    return out


def logged(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("rank*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-example") / "demo"
    write_demo_dataset(root, num_episodes=12, min_length=20, max_length=40, progress=False)
    return root


def test_two_nodes_then_resume_on_one_process(demo, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    common = ["--root", demo, "--ckpt", ckpt, "--batch-size", 8, "--pool", 4, "--save-every", 3]
    port = free_port()
    nodes = [
        launch(
            [*common, "--steps", 6, "--workers", 1, "--log-indices", tmp_path / "a"], nnodes=2, node_rank=r, port=port
        )
        for r in (0, 1)
    ]
    outs = [finish(p) for p in nodes]
    assert "total:" in outs[0] and "over 2 process(es)" in outs[0]
    state = torch.load(ckpt, weights_only=False)
    stream = json.loads(state["stream"])
    assert state["step"] == 6 and stream["batches_consumed"] == 6 and stream["world_size"] == 2
    assert state["model"] is not None  # DDP trained a model and rank 0 saved it
    first = logged(tmp_path / "a")
    assert len(first) == 12 and all(e["epoch"] == 0 for e in first)
    # resume on a single plain process (no torchrun): it finishes epoch 0, then goes on into epoch 1
    out = finish(launch([*common, "--steps", 200, "--workers", 2, "--log-indices", tmp_path / "b"], torchrun=False))
    assert "resumed at step 6 on 1 process(es)" in out
    rest = [e for e in logged(tmp_path / "b") if e["epoch"] == 0]
    epoch0 = [i for e in first + rest for i in e["index"]]
    from episodic import LeRobotDataset

    assert sorted(epoch0) == list(range(LeRobotDataset("x", root=demo).num_frames))  # each frame once


def test_under_accelerate(demo, tmp_path):
    pytest.importorskip("accelerate")
    ckpt = tmp_path / "ckpt.pt"
    out = finish(
        launch(
            [
                "--accelerate",
                "--root",
                demo,
                "--ckpt",
                ckpt,
                "--batch-size",
                8,
                "--steps",
                5,
                "--workers",
                0,
                "--log-indices",
                tmp_path / "log",
            ],
            nproc=2,
        )
    )
    assert "over 2 process(es)" in out
    entries = logged(tmp_path / "log")
    assert len(entries) == 10
    flat = [i for e in entries for i in e["index"]]
    assert len(flat) == len(set(flat)) == 80  # the two ranks' batches are disjoint
    stream = json.loads(torch.load(ckpt, weights_only=False)["stream"])
    assert stream["batches_consumed"] == 5 and stream["world_size"] == 2
