"""The session directory: what a target directory counts as, the journal (commit point of an episode,
torn lines, failed appends), and what reopening drops."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from episodic import DatasetWriter
from episodic.format.errors import WriterSessionError
from episodic.writer.session import (
    ABSENT,
    DATASET,
    EMPTY,
    FILE,
    FOREIGN,
    JOURNAL,
    SESSION,
    SESSION_DIR,
    directory_state,
    segment_episode,
)

FEATS = {"action": {"dtype": "float32", "shape": [2]}}


def _episode(n: int, value: float) -> dict:
    return {"action": np.full((n, 2), value, np.float32)}


def test_directory_states(tmp_path):
    assert directory_state(str(tmp_path / "none")) == ABSENT
    (tmp_path / "f").write_text("x")
    assert directory_state(str(tmp_path / "f")) == FILE
    (tmp_path / "e" / SESSION_DIR).mkdir(parents=True)
    assert directory_state(str(tmp_path / "e")) == EMPTY  # a writer killed while opening
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    assert directory_state(str(tmp_path / "o")) == FOREIGN
    w = DatasetWriter(tmp_path / "d", fps=10, features=FEATS)
    assert directory_state(str(tmp_path / "d")) == SESSION
    w.add_episode(_episode(2, 1.0), task="t")
    w.finalize()
    assert directory_state(str(tmp_path / "d")) == DATASET


def test_journal_holds_one_line_per_complete_episode(tmp_path):
    w = DatasetWriter(tmp_path / "ds", fps=10, features=FEATS)
    for e in range(3):
        w.add_episode(_episode(e + 2, e), task=f"t{e}")
        lines = (tmp_path / "ds" / SESSION_DIR / JOURNAL).read_bytes().splitlines()
        assert len(lines) == e + 1  # written before add_episode returned
        rec = json.loads(lines[-1])
        assert rec["episode"]["episode_index"] == e and rec["episode"]["length"] == e + 2
        assert rec["episode"]["tasks"] == [f"t{e}"] and "action" in rec["stats"]
    w.abort()


def test_torn_last_line_and_partial_segments_are_dropped_on_reopen(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=10, features=FEATS)
    for e in range(2):
        w.add_episode(_episode(3, e), task="t")
    w.abort()
    journal = root / SESSION_DIR / JOURNAL
    good = journal.read_bytes()
    # what a writer killed inside episode 2 can leave: a segment, a temporary file, a partial line
    seg_dir = root / SESSION_DIR / "segments" / "data" / "chunk-000" / "file-000"
    (seg_dir / "episode-000000002.parquet").write_bytes(b"PAR1 partial")
    (seg_dir / ".episode-000000002.parquet.123.0123456789ab.tmp").write_bytes(b"x")
    journal.write_bytes(good + b'{"episode": {"episode_index": 2, "tas')
    w = DatasetWriter.reopen(root)
    r = w.recovery
    assert (r.episodes, r.frames, r.torn_bytes) == (2, 6, len(b'{"episode": {"episode_index": 2, "tas'))
    assert r.partial_files == [f"{SESSION_DIR}/segments/data/chunk-000/file-000/episode-000000002.parquet"]
    assert len(r.temp_files) == 1 and r.joined_files == []
    assert "incomplete episode 2 dropped" in r.summary() and "partial journal line" in r.summary()
    assert journal.read_bytes() == good
    w.add_episode(_episode(4, 9), task="t")  # episode 2 again, written in full
    w.finalize()
    from episodic import EpisodicDataset

    ds = EpisodicDataset(root)
    assert ds.meta.episodes.length.tolist() == [3, 3, 4]
    assert ds.get_batch([6])["action"].tolist() == [[9.0, 9.0]]


def test_a_corrupt_journal_is_a_named_error(tmp_path):
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=10, features=FEATS)
    w.add_episode(_episode(3, 0), task="t")
    w.add_episode(_episode(3, 1), task="t")
    w.abort()
    journal = root / SESSION_DIR / JOURNAL
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"not json\n" + lines[1])
    with pytest.raises(WriterSessionError, match=f"{JOURNAL}:1: not a valid episode record"):
        DatasetWriter.reopen(root)
    journal.write_bytes(lines[1])  # episode 1 without episode 0
    with pytest.raises(WriterSessionError, match=f"{JOURNAL}:1: episode 1 does not continue"):
        DatasetWriter.reopen(root)
    journal.write_bytes(b"".join(lines))
    seg = next((root / SESSION_DIR / "segments" / "data").rglob("episode-000000001.parquet"))
    os.unlink(seg)
    with pytest.raises(WriterSessionError, match="segment of complete episode 1 is missing"):
        DatasetWriter.reopen(root)


def test_a_failed_append_leaves_the_journal_as_it_was(tmp_path):
    """A partial line left by an append that failed half-way (a short write on a full disk, whose cut-back
    failed too) is cut before the next append, which lands right after the last complete line."""
    root = tmp_path / "ds"
    w = DatasetWriter(root, fps=10, features=FEATS)
    w.add_episode(_episode(2, 0), task="t")
    journal = root / SESSION_DIR / JOURNAL
    before = journal.read_bytes()
    with open(journal, "ab") as f:  # what a short write on a full disk leaves
        f.write(b'{"episode": {"epis')
    w.add_episode(_episode(2, 1), task="t")
    lines = journal.read_bytes().splitlines()
    assert journal.read_bytes().startswith(before) and len(lines) == 2
    assert json.loads(lines[1])["episode"]["episode_index"] == 1
    w.finalize()


def test_segment_episode_reads_the_index_from_a_segment_name():
    assert segment_episode(".episodic-session/segments/data/chunk-000/file-000/episode-000000012.parquet") == 12
    assert segment_episode("episode-000000000.mp4") == 0
    assert segment_episode("file-000.mp4") == -1  # a joined file, not a segment
    assert segment_episode("episode-x.mp4") == -1
    assert segment_episode("episode.mp4") == -1
