"""`episodic repair`: finalizes an interrupted session, leaves a finished dataset alone (cleaning what a
kill at the very end left), removes a session without any complete episode, refuses anything else."""

from __future__ import annotations

import os

import numpy as np
import pytest

from episodic import DatasetWriter, EpisodicDataset
from episodic.cli import main
from episodic.format.errors import WriterSessionError
from episodic.tools.repair import repair
from episodic.writer.session import JOURNAL, SESSION_DIR

FEATS = {"action": {"dtype": "float32", "shape": [2]}}


def _session(root, episodes: int) -> None:
    w = DatasetWriter(root, fps=10, features=FEATS)
    for e in range(episodes):
        w.add_episode({"action": np.full((3, 2), e, np.float32)}, task=f"t{e}")
    w.abort()


def test_repair_finalizes_the_complete_episodes(tmp_path, capsys):
    root = tmp_path / "ds"
    _session(root, 3)
    assert main(["repair", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"repaired {root}: 3 complete episode(s), 9 frames kept" in out
    ds = EpisodicDataset(root)
    assert ds.meta.tasks == ["t0", "t1", "t2"] and ds.get_batch([8])["action"].tolist() == [[2.0, 2.0]]
    assert sorted(os.listdir(root)) == ["data", "meta"]
    assert main(["repair", str(root)]) == 0
    assert "already a finished dataset, nothing to repair" in capsys.readouterr().out


def test_repair_cleans_a_session_directory_left_after_finalize(tmp_path):
    root = tmp_path / "ds"
    _session(root, 1)
    repair(root)
    leftover = root / SESSION_DIR
    leftover.mkdir()
    (leftover / JOURNAL).write_text("{}\n")  # a kill between info.json and the session's removal
    (root / "meta" / ".info.json.77.0123456789ab.tmp").write_text("x")
    report = repair(root)
    assert not report.repaired and len(report.cleaned) == 2 and "removed 2 leftover" in report.summary()
    assert sorted(os.listdir(root)) == ["data", "meta"]
    assert ".info.json.77.0123456789ab.tmp" not in os.listdir(root / "meta")


def test_a_session_without_complete_episodes_is_removed(tmp_path):
    root = tmp_path / "ds"
    _session(root, 0)
    report = repair(root)
    assert not report.repaired and report.recovery.episodes == 0
    assert "no complete episode" in report.summary()
    assert root.is_dir() and os.listdir(root) == []


def test_repair_refuses_what_is_not_a_session(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(WriterSessionError, match="neither a dataset nor an interrupted writing session"):
        repair(tmp_path / "other")
    assert main(["repair", str(tmp_path / "missing")]) == 2
    assert "nothing to repair" in capsys.readouterr().err
    assert os.listdir(tmp_path / "other") == ["x.txt"]
