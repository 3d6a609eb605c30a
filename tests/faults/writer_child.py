"""A writing session run as a separate process (to be killed), and the deterministic episodes it writes.

Run as a script: `python writer_child.py ROOT --episodes N --seed S [--start-at T]` opens a writer on ROOT
(reopening the interrupted session when there is one), adds episodes from the next index up to N, finalizes,
and reports each step on stdout, flushed: `opened K` (K complete episodes found), `recovery ...` (what
reopening dropped), `added E` (add_episode
returned for episode E), `finalizing`, `finalized`, or `error NAME: MESSAGE` for a writer error.

Each frame carries its identity (seed, episode, frame index, camera and a checksum) as 8x8 blocks of dark and
light grey: no two frames of a session look alike, so a frame shifted, swapped or taken from another episode
shows in the checks (writer_checks.py compares the decoded frames with the episode encoded alone).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HEIGHT, WIDTH, BLOCK = 48, 64, 8
BITS = (HEIGHT // BLOCK) * (WIDTH // BLOCK)  # 48
CAMERAS = ("observation.images.top", "observation.images.wrist")
DIM = 6
TASKS = ("pick the cube", "place the cube")
# Small files: every few episodes a data or video file fills up and is joined during add_episode.
WRITER_OPTIONS = dict(fps=30, data_files_size_in_mb=0.012, video_files_size_in_mb=0.02, chunks_size=2)


def features() -> dict:
    feats = {"observation.state": {"dtype": "float32", "shape": [DIM]}, "action": {"dtype": "float32", "shape": [DIM]}}
    for cam in CAMERAS:
        feats[cam] = {"dtype": "video", "shape": [HEIGHT, WIDTH, 3]}
    return feats


def episode_length(seed: int, ep: int) -> int:
    return int(np.random.default_rng([seed, ep, 1]).integers(8, 24))


def _code(seed: int, ep: int, frame: int, cam: int) -> int:
    check = (ep * 131 + frame * 31 + seed * 7 + cam * 3) % 256
    return (ep % 4096) | (frame % 4096) << 12 | (seed % 128) << 24 | cam << 31 | check << 32


def coded_frame(seed: int, ep: int, frame: int, cam: int) -> np.ndarray:
    code = _code(seed, ep, frame, cam)
    bits = np.array([(code >> i) & 1 for i in range(BITS)], np.uint8).reshape(HEIGHT // BLOCK, WIDTH // BLOCK)
    img = np.kron(bits, np.ones((BLOCK, BLOCK), np.uint8)) * 160 + 48  # 48 or 208
    return np.repeat(img[:, :, None], 3, axis=2)


def episode(seed: int, ep: int) -> dict[str, np.ndarray]:
    n = episode_length(seed, ep)
    rng = np.random.default_rng([seed, ep])
    out = {
        "observation.state": rng.standard_normal((n, DIM)).astype(np.float32),
        "action": rng.standard_normal((n, DIM)).astype(np.float32),
    }
    for c, cam in enumerate(CAMERAS):
        out[cam] = np.stack([coded_frame(seed, ep, f, c) for f in range(n)])
    return out


def task_of(ep: int) -> str:
    return TASKS[ep % len(TASKS)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--episodes", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start-at", type=float, default=None, help="time.time() at which to open the writer")
    a = ap.parse_args(argv)
    import faulthandler

    faulthandler.dump_traceback_later(120, exit=True)  # a hang shows where it is instead of timing out silently
    from episodic.format.errors import WriterError
    from episodic.writer import DatasetWriter
    from episodic.writer.session import SESSION, directory_state

    def say(msg: str) -> None:
        sys.stdout.write(msg + "\n")
        sys.stdout.flush()

    if a.start_at is not None:
        time.sleep(max(0.0, a.start_at - time.time()))
    try:
        if directory_state(os.path.abspath(a.root)) == SESSION:
            w = DatasetWriter.reopen(a.root)
        else:
            w = DatasetWriter(a.root, features=features(), **WRITER_OPTIONS)
    except WriterError as e:
        say(f"error {type(e).__name__}: {e}")
        return 3
    say(f"opened {w.num_episodes}")
    if w.recovery is not None:
        say(f"recovery {w.recovery.summary()}")
    for ep in range(w.num_episodes, a.episodes):
        got = w.add_episode(episode(a.seed, ep), task=task_of(ep))
        assert got == ep, (got, ep)
        say(f"added {ep}")
    say("finalizing")
    w.finalize()
    say("finalized")
    return 0


if __name__ == "__main__":
    sys.exit(main())
