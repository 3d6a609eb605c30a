"""Two writer processes started at the same moment on one new directory: exactly one writes the dataset,
the other gets a named error (never two successes and a dataset missing one side's episodes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import writer_checks

CHILD = Path(__file__).with_name("writer_child.py")
EPISODES = 4


def _race(root: Path) -> None:
    start_at = time.time() + 1.5  # both processes are up (imports done) by then
    procs = {
        seed: subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                str(root),
                "--episodes",
                str(EPISODES),
                "--seed",
                str(seed),
                "--start-at",
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    }
    results = {seed: p.communicate(timeout=300) for seed, p in procs.items()}
    codes = {seed: p.returncode for seed, p in procs.items()}
    winners = [s for s, c in codes.items() if c == 0]
    assert len(winners) == 1, (codes, results)
    (winner,) = winners
    (loser,) = [s for s in codes if s != winner]
    out, err = results[loser]
    assert codes[loser] == 3 and "Traceback" not in err, (out, err)
    # locked while the winner writes, or a finished dataset when it was already done
    assert "error WriterLockedError" in out or "error ExistingDirectoryError" in out, out
    assert "added" not in out
    writer_checks.assert_layout(root)
    writer_checks.assert_episodes(root, winner, EPISODES, decode=False)


@pytest.mark.parametrize("attempt", range(2))
def test_two_writers_one_new_directory(tmp_path, attempt):
    _race(tmp_path / "ds")


@pytest.mark.slow
@pytest.mark.parametrize("attempt", range(12))
def test_two_writers_one_new_directory_many(tmp_path, attempt):
    _race(tmp_path / "ds")
