"""File series: which episodes go into which (chunk, file), rotation by size and chunk size."""

from __future__ import annotations

from episodic.writer.groups import Series


def test_rotation_by_size_and_chunks():
    s = Series(None, limit_bytes=100, chunks_size=2)
    placed = []
    for ep, size in enumerate([60, 50, 120, 10, 10, 10]):
        placed.append((s.open.chunk, s.open.file))
        s.add(ep, length=5, nbytes=size)
    # 60+50 fills file 0; 120 alone fills file 1 (chunk 0 has 2 files); the rest share chunk 1 file 0
    assert placed == [(0, 0), (0, 0), (0, 1), (1, 0), (1, 0), (1, 0)]
    assert [(g.chunk, g.file, g.episodes, g.frames) for g in s.pending] == [(0, 0, [0, 1], 10), (0, 1, [2], 5)]
    assert s.pending[0].rel == "data/chunk-000/file-000.parquet"
    assert s.open.episodes == [3, 4, 5] and s.open.bytes == 30


def test_joined_groups_leave_pending_and_the_open_one_closes():
    s = Series("cam", limit_bytes=10, chunks_size=1000)
    s.add(0, 3, 20)
    first = s.pending[0]
    s.add(1, 3, 1)
    assert first.rel == "videos/cam/chunk-000/file-000.mp4"
    s.joined(first)
    assert s.pending == []
    open_group = s.open
    s.joined(open_group)  # finalize joined the open file: new episodes go to the next one
    assert s.pending == [] and (s.open.chunk, s.open.file) == (0, 2) and s.open.episodes == []
