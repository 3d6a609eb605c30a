"""SIGKILL a real writing process at random points, again and again on one session, then repair.

Each round runs writer_child.py (a writer that reopens the interrupted session and goes on) and kills it with
SIGKILL after a random event (opening, an `add_episode` returning, the start of finalize) plus a random delay,
so kills land while encoding, while writing segments or the journal, while joining full files, inside
finalize, and while reopening. After every kill the next round must find every episode whose add_episode had
returned (at most one more: killed between the return and the report); at the end `repair` must produce a
dataset of exactly those episodes: rows equal, every frame the very frame written, LeRobot's layout only.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from episodic.format.errors import WriterSessionError
from episodic.tools.repair import repair
from episodic.writer.session import ABSENT, DATASET, EMPTY, directory_state

import writer_checks

CHILD = Path(__file__).with_name("writer_child.py")
EVENT_TIMEOUT_S = 120


class Round:
    """One writer process: its reported events, and a SIGKILL after a chosen event."""

    def __init__(self, root: Path, episodes: int, seed: int):
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(root), "--episodes", str(episodes), "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.events: list[str] = []
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def next_event(self) -> str | None:
        try:
            line = self.lines.get(timeout=EVENT_TIMEOUT_S)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"writer silent for {EVENT_TIMEOUT_S} s; events so far {self.events}") from None
        if line is not None:
            self.events.append(line)
        return line

    def kill_after(self, n_events: int, delay_s: float) -> None:
        """SIGKILL after the n-th event (0: at once after start) and `delay_s` more (unless it ended first)."""
        while len(self.events) < n_events:
            if self.next_event() is None:
                break
        time.sleep(delay_s)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        while self.next_event() is not None:
            pass
        self.proc.wait(30)
        self.stderr = self.proc.stderr.read()
        self.proc.stderr.close()
        self.proc.stdout.close()

    def opened(self) -> int | None:
        return next((int(e.split()[1]) for e in self.events if e.startswith("opened ")), None)

    def added(self) -> list[int]:
        return [int(e.split()[1]) for e in self.events if e.startswith("added ")]


def kill_session(root: Path, seed: int, episodes: int, rounds: int, rng: np.random.Generator) -> tuple[int, int]:
    """Run up to `rounds` writer processes on one session, each killed at a random point (opening, adding,
    joining, finalizing); returns (episodes whose add_episode returned, kills that landed before the process
    ended). Stops when a round finished the dataset."""
    confirmed, kills = 0, 0
    for r in range(rounds):
        if directory_state(str(root)) == DATASET:
            break
        rnd = Round(root, episodes, seed)
        remaining = episodes - confirmed
        # events: opened, recovery (when reopened), added x remaining (at most), finalizing, finalized; the
        # first round is killed before its last two episodes
        n_events = int(rng.integers(0, max(remaining - 1, 1) if r == 0 else remaining + 4))
        delay = float(rng.uniform(0, 0.15)) if n_events else float(rng.uniform(0.2, 1.5))
        rnd.kill_after(n_events, delay)
        killed = rnd.proc.returncode == -signal.SIGKILL
        kills += killed
        assert killed or rnd.proc.returncode == 0, (rnd.proc.returncode, rnd.events, rnd.stderr[-3000:])
        assert "Traceback" not in rnd.stderr, rnd.stderr[-3000:]
        opened = rnd.opened()
        if opened is not None:
            # the last round's returned episodes are all there, plus at most the one killed before its report
            assert confirmed <= opened <= confirmed + 1, (r, confirmed, rnd.events)
            confirmed = opened
        added = rnd.added()
        assert added == list(range(confirmed, confirmed + len(added))), (confirmed, added)
        confirmed += len(added)
    return confirmed, kills


def repair_and_check(root: Path, seed: int, confirmed: int) -> str:
    """Repair `root` and check it holds the confirmed episodes (plus at most the one killed before its
    report), exactly; returns the repair summary."""
    if directory_state(str(root)) in (ABSENT, EMPTY):  # killed before the session existed
        assert confirmed == 0
        with pytest.raises(WriterSessionError, match="nothing to repair"):
            repair(root)
        return "no session"
    report = repair(root)
    if report.recovery is not None and not report.repaired:  # no complete episode: the session is removed
        assert confirmed == 0 and report.recovery.episodes == 0
        assert os.listdir(root) == [], os.listdir(root)
        return report.summary()
    found = writer_checks.count_episodes(root)
    if report.repaired:
        assert report.recovery.episodes == found
    assert confirmed <= found <= confirmed + 1, (confirmed, report.summary())
    writer_checks.assert_layout(root)
    writer_checks.assert_episodes(root, seed, found)
    return report.summary()


def _one_kill(tmp_path: Path, seed: int, episodes: int) -> None:
    rng = np.random.default_rng(seed)
    root = tmp_path / f"ds{seed}"
    rnd = Round(root, episodes, seed)
    n_events = int(rng.integers(0, episodes + 3))  # opened, added x episodes, finalizing, (finalized)
    delay = float(rng.uniform(0, 0.15)) if n_events else float(rng.uniform(0.2, 1.5))
    rnd.kill_after(n_events, delay)
    assert rnd.proc.returncode in (0, -signal.SIGKILL), (rnd.proc.returncode, rnd.stderr[-3000:])
    try:
        repair_and_check(root, seed, len(rnd.added()))
    except AssertionError as e:  # say where the kill landed
        raise AssertionError(f"{e}\nkilled {delay:.3f} s after event {n_events}: {rnd.events}") from e


def _chain(tmp_path: Path, seed: int, episodes: int, rounds: int) -> None:
    rng = np.random.default_rng(seed)
    root = tmp_path / f"ds{seed}"
    confirmed, kills = kill_session(root, seed, episodes, rounds, rng)
    assert kills >= 1  # something was killed (a round may end before its kill)
    repair_and_check(root, seed, confirmed)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_sigkill_at_a_random_point_then_repair(tmp_path, seed):
    _one_kill(tmp_path, seed, episodes=8)


@pytest.mark.parametrize("seed", [21])
def test_sigkill_again_and_again_while_resuming(tmp_path, seed):
    _chain(tmp_path, seed, episodes=8, rounds=4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 140))
def test_sigkill_at_a_random_point_many(tmp_path, seed):
    _one_kill(tmp_path, seed, episodes=16)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 210))
def test_sigkill_chains_many(tmp_path, seed):
    _chain(tmp_path, seed, episodes=20, rounds=10)


def test_repair_command_line_after_a_kill(tmp_path):
    """`episodic repair PATH` as a user runs it, after a writer was killed in the middle of an episode."""
    root = tmp_path / "ds"
    rnd = Round(root, 50, seed=5)
    rnd.kill_after(4, 0.05)  # after episode 2 returned, inside episode 3
    assert rnd.proc.returncode == -signal.SIGKILL, rnd.events
    added = rnd.added()
    out = subprocess.run(
        [sys.executable, "-m", "episodic.cli", "repair", str(root)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"repaired {root}") and "complete episode(s)" in out.stdout, out.stdout
    found = writer_checks.count_episodes(root)
    assert len(added) <= found <= len(added) + 1
    writer_checks.assert_layout(root)
    writer_checks.assert_episodes(root, 5, found)
    again = subprocess.run(
        [sys.executable, "-m", "episodic.cli", "repair", str(root)], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and "nothing to repair" in again.stdout, again.stdout + again.stderr
