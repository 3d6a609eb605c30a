"""Run by tests/datasets/test_start_methods.py in a child process: LeRobot 0.6's training loop over an episodic
dataset (start method ROOT's argv[2], persistent workers, prefetch_factor 4: the workers share through the file
system after their first batches), two epochs, then a normal exit, which must come by itself.

    python spawn_exit_child.py ROOT METHOD OUT.json

OUT.json: items handed out, how many torch_shm_manager processes started meanwhile, and which of them hold the
resource tracker's pipe or a worker's sentinel pipe (`held`: should be none)."""

from __future__ import annotations

import json
import multiprocessing.resource_tracker as resource_tracker
import os
import sys


def _managers() -> set[int]:
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:  # (comm is cut to 15 characters)
                    if os.path.basename(f.read().split(b"\0")[0]) == b"torch_shm_manager":
                        out.add(int(pid))
            except OSError:
                pass
    return out


def _pipes_of(pid: int) -> set[str]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    return out


def main() -> None:
    import torch

    from episodic import LeRobotDataset

    root, method, out = sys.argv[1:4]
    before = _managers()
    ds = LeRobotDataset("x", root=root)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        multiprocessing_context=method,
    )
    items = 0
    for _ in range(2):
        for batch in loader:
            items += len(batch["index"])
    it = loader._iterator  # the persistent workers' iterator: its workers are still alive here
    ours = {}
    tracker_fd = getattr(resource_tracker._resource_tracker, "_fd", None)
    if tracker_fd is not None:
        ours[f"pipe:[{os.fstat(tracker_fd).st_ino}]"] = "resource tracker"
    for w in it._workers:
        ours[f"pipe:[{os.fstat(w.sentinel).st_ino}]"] = f"sentinel of worker {w.pid}"
    started = _managers() - before
    held = sorted(f"{pid}: {ours[p]}" for pid in started for p in _pipes_of(pid) if p in ours)
    with open(out, "w") as f:
        json.dump({"items": items, "managers": len(started), "held": held}, f)


if __name__ == "__main__":
    main()
