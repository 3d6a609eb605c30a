"""Clean shutdown: a loader with workers left open at exit, abandoned, or interrupted by SIGINT leaves no
'terminate called' noise, no worker process and no shared-memory file behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time, torch, episodic
    mode, how, root = sys.argv[1], sys.argv[2], sys.argv[3]
    # Ctrl-C raises KeyboardInterrupt, as in a terminal (a shell's background job starts with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if mode == "map":
        it = iter(torch.utils.data.DataLoader(episodic.LeRobotDataset("x", root=root), batch_size=4, num_workers=2,
                                              shuffle=True))
    elif mode == "native":
        it = iter(episodic.EpisodicDataset(root).loader(batch_size=4, num_workers=2))
    else:
        it = iter(episodic.StreamingLeRobotDataset("x", root=root).loader(batch_size=4, num_workers=2))
    for _ in range(6):  # past the workers' switch to file-system sharing
        batch = next(it)
    kids = [c for t in os.listdir("/proc/self/task") for c in open(f"/proc/self/task/{t}/children").read().split()]
    print("workers", *kids, flush=True)
    if how == "sigint":  # Ctrl-C while the loader and its workers are live; it lands in the sleep, in this frame
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)
        for batch in it:
            pass
    elif how == "abandon":
        del it
        import gc; gc.collect()
""")


def _shm_files(pids) -> list[str]:
    """torch's shared-memory files made by these processes (named torch_<pid>_...)."""
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return []
    return [f for f in names if f.startswith("torch_") and f.split("_")[1] in {str(p) for p in pids}]


@pytest.mark.parametrize(
    "mode, how", [("map", "exit"), ("native", "exit"), ("stream", "exit"), ("map", "sigint"), ("stream", "abandon")]
)
def test_no_noise_no_leaks(small_root, tmp_path, mode, how):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), mode, how, str(small_root)], capture_output=True, text=True, timeout=120
    )
    assert "terminate called" not in out.stderr and "Broken pipe" not in out.stderr, out.stderr
    if how == "sigint":
        assert out.returncode != 0 and "KeyboardInterrupt" in out.stderr
    else:
        assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split("workers", 1)[1].split()] if "workers" in out.stdout else []
    deadline = time.time() + 10
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")], "worker processes outlived the script"
    assert pids and not _shm_files(pids)
