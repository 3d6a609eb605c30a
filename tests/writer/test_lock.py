"""One writer per directory: a second writer (same process or another) or a repair gets WriterLockedError
naming the holder; a lock left by a killed process is taken over."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from episodic import DatasetWriter
from episodic.format.errors import WriterLockedError
from episodic.tools.repair import repair
from episodic.writer.lock import DirectoryLock

FEATS = {"action": {"dtype": "float32", "shape": [2]}}
EPISODE = {"action": [[0.0, 1.0]] * 3}

HOLDER = textwrap.dedent("""
    import sys, time
    from episodic import DatasetWriter
    w = DatasetWriter(sys.argv[1], fps=10, features={"action": {"dtype": "float32", "shape": [2]}})
    w.add_episode({"action": [[0.0, 1.0]] * 3}, task="held")
    print("holding", flush=True)
    time.sleep(120)
""")


def test_second_writer_in_the_same_process(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=10, features=FEATS)
    with pytest.raises(WriterLockedError, match=f"another writer is using this directory .pid {os.getpid()}"):
        DatasetWriter(tmp_path / "ds", fps=10, features=FEATS, resume=True)
    with pytest.raises(WriterLockedError):
        DatasetWriter.reopen(tmp_path / "ds")
    with pytest.raises(WriterLockedError):
        repair(tmp_path / "ds")
    w.add_episode(EPISODE, task="t")  # the first writer is unaffected
    w.abort()
    w2 = DatasetWriter.reopen(tmp_path / "ds")  # released: free to take
    assert w2.num_episodes == 1
    w2.finalize()


def test_a_killed_writer_process_leaves_no_lock_behind(tmp_path, caplog):
    root = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        with pytest.raises(WriterLockedError, match=f"pid {proc.pid} on "):
            DatasetWriter.reopen(root)
        with pytest.raises(WriterLockedError, match=f"pid {proc.pid}"):
            DatasetWriter(root, fps=10, features=FEATS, overwrite=True)  # overwrite never steals a live lock
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    with caplog.at_level(logging.INFO, logger="episodic.writer"):
        w = DatasetWriter.reopen(root)
    assert f"took over the lock of a writer that no longer runs (pid {proc.pid}" in caplog.text
    assert w.num_episodes == 1
    w.finalize()
    assert not (root / ".episodic-writer").exists()


def test_lock_release_and_reacquire(tmp_path):
    path = str(tmp_path / "lock")
    a = DirectoryLock.acquire(path, "dir")
    assert a.held and a.previous == ""
    with pytest.raises(WriterLockedError, match="dir: another writer"):
        DirectoryLock.acquire(path, "dir")
    a.release()
    assert not a.held
    b = DirectoryLock.acquire(path, "dir")
    assert b.previous == ""  # released in order: no dead holder to report
    b.release(remove=True)
    assert not os.path.exists(path)
    b.release()  # a no-op


def test_a_dropped_writer_releases_its_lock(tmp_path):
    import gc

    w = DatasetWriter(tmp_path / "ds", fps=10, features=FEATS)
    w.add_episode(EPISODE, task="t")
    del w
    gc.collect()
    assert DatasetWriter.reopen(tmp_path / "ds").num_episodes == 1
