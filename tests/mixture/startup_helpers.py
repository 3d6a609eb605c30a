"""Helpers of the mixture start-up tests (not a test module): datasets served over HTTP, the files training
needs worked out episode by episode, and launchers of real process groups (torchrun, or plain processes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from fsspec.implementations.local import LocalFileSystem

from episodic.format import load_metadata
from episodic.mixture import MixtureSpec
from episodic.mixture.checking.entry_checks import selected_episodes
from episodic.testing.synthetic import mixture_spec

from support import FaultServer

WORKER = Path(__file__).with_name("startup_worker.py")
USED = 6  # entries of the mixture (of the 12 synthetic datasets)


# ------------------------------------------------------------------------------------------ data and spec
def http_spec(synthetic, server: FaultServer) -> dict:
    """USED datasets served by `server`, v2.1 and v3.0: the first with several cameras maps one camera fewer than it
    has; the first v2.1 one (a file per episode) selects episodes 0 and 1 of its 3 or more."""
    datasets = synthetic[:USED]
    spec = mixture_spec(datasets)
    for entry, d in zip(spec["entries"], datasets):
        entry["source"] = f"{server.url}/{Path(d.path).name}"
    multi = next(i for i, d in enumerate(datasets) if len(d.cameras) >= 2)
    spec["entries"][multi]["roles"].pop(datasets[multi].cameras[0].rsplit(".", 1)[-1])
    v21 = next(i for i, d in enumerate(datasets) if d.version == "v2.1")
    assert datasets[v21].episodes > 2 and any(d.version == "v3.0" for d in datasets)
    spec["entries"][v21]["episodes"] = [0, 1]
    return spec


def expected(synthetic, spec: dict) -> tuple[set[str], set[str]]:
    """(server paths of the files training reads, of the data/video files it must never fetch), worked out
    episode by episode from each dataset's local metadata."""
    need, never = set(), set()
    for entry, d in zip(spec["entries"], synthetic):
        meta = load_metadata(LocalFileSystem(), d.path)
        name = Path(d.path).name
        selected = set(selected_episodes(MixtureSpec.from_dict({"entries": [entry]}).entries[0], meta.total_episodes))
        mapped = {k for role, k in entry["roles"].items() if role not in ("state", "action", "task")}
        for ep in range(meta.total_episodes):
            files = {meta.data_file_of(ep)} | {meta.video_file_of(ep, k) for k in meta.video_keys}
            wanted = {meta.data_file_of(ep)} | {meta.video_file_of(ep, k) for k in meta.video_keys if k in mapped}
            if ep in selected:
                need |= {f"/{name}/{f}" for f in wanted}
            never |= {f"/{name}/{f}" for f in files - wanted}
    never -= need  # a file shared by a selected and an unselected episode is needed
    assert never, "the spec must leave some files out"
    return need, never


def data_gets(server: FaultServer) -> list[str]:
    return [p for m, p, _ in server.requests if m == "GET" and "/meta/" not in p]


def write_spec(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "mixture.json"
    path.write_text(json.dumps(spec))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cache: Path, **extra) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", EPISODIC_CACHE=str(cache), PYTHONPATH=os.pathsep.join(sys.path))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun(out: Path, spec_path: Path, cache: Path, nproc: int, *args) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(WORKER),
        "--spec",
        str(spec_path),
        "--out",
        str(out),
        *map(str, args),
    ]
    return subprocess.Popen(cmd, env=_env(cache), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def plain_ranks(
    out: Path, spec_path: Path, caches: list[Path], nodes: list[int], *args, local_rank: bool = True
) -> list[subprocess.Popen]:
    """One plain process per rank (no torchrun agent, which would kill the others when one dies): rank r on node
    nodes[r] (GROUP_RANK), LOCAL_RANK its rank on that node (unset with `local_rank=False`: the team then picks
    each node's lowest rank), its cache caches[r]."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for rank, node in enumerate(nodes):
        local = {"LOCAL_RANK": nodes[:rank].count(node)} if local_rank else {}
        env = _env(
            caches[rank],
            RANK=rank,
            WORLD_SIZE=len(nodes),
            GROUP_RANK=node,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            **local,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), "--spec", str(spec_path), "--out", str(out), *map(str, args)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def finish(proc: subprocess.Popen, timeout: float = 90) -> str:
    """`proc`'s output once it ended with status 0; killed (with its children) when it runs past `timeout`."""
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise
    assert proc.returncode == 0, output[-4000:]
    return output


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill `proc` and the processes it started (torchrun's workers), by their ids."""
    try:
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    except OSError:
        children = []
    for pid in children:
        try:
            os.kill(int(pid), 9)
        except OSError:
            pass
    proc.kill()
    proc.communicate()


def records(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
