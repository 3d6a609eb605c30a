"""The one temp-then-rename helper: complete files or nothing, temp files cleaned up, umask modes, and
concurrent writers of one path from two processes."""

from __future__ import annotations

import multiprocessing
import os
import stat
import time

import pytest

from episodic.storage.atomic import AtomicFile, atomic_path, atomic_write_bytes, is_temp_name, temp_files


def _entries(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_atomic_path_renames_on_success(tmp_path):
    final = tmp_path / "sub" / "file.bin"
    with atomic_path(final) as tmp:
        assert os.path.dirname(tmp) == str(final.parent)  # same directory: the rename is atomic
        assert os.path.basename(tmp).startswith(".") and tmp.endswith(".tmp")
        assert not final.exists()
        with open(tmp, "wb") as f:
            f.write(b"complete")
    assert final.read_bytes() == b"complete"
    assert _entries(final.parent) == ["file.bin"]


def test_failure_leaves_neither_final_nor_temp(tmp_path):
    final = tmp_path / "file.bin"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(final) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"partial")
            raise RuntimeError("boom")
    assert _entries(tmp_path) == []


def test_failure_keeps_an_existing_final_file(tmp_path):
    final = tmp_path / "file.bin"
    atomic_write_bytes(final, b"old")
    with pytest.raises(KeyError):
        with atomic_path(final) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"new but incomplete")
            raise KeyError("x")
    assert final.read_bytes() == b"old"
    assert _entries(tmp_path) == ["file.bin"]


def test_atomic_write_bytes_replaces(tmp_path):
    final = tmp_path / "a" / "b.json"
    atomic_write_bytes(final, b"1")
    atomic_write_bytes(final, b"22")
    assert final.read_bytes() == b"22" and _entries(final.parent) == ["b.json"]


def test_temp_names_are_unique_per_call(tmp_path):
    a, b = AtomicFile(tmp_path / "x"), AtomicFile(tmp_path / "x")
    assert a.tmp != b.tmp and os.path.exists(a.tmp) and os.path.exists(b.tmp)
    a.discard()
    b.discard()
    assert _entries(tmp_path) == []


def test_atomic_file_commit_and_discard(tmp_path):
    f = AtomicFile(tmp_path / "data.parquet")
    with open(f.tmp, "ab") as out:  # a long-lived writer appends across many calls
        out.write(b"part1")
    with open(f.tmp, "ab") as out:
        out.write(b"part2")
    assert not (tmp_path / "data.parquet").exists()
    assert f.commit() == str(tmp_path / "data.parquet")
    assert (tmp_path / "data.parquet").read_bytes() == b"part1part2"
    f.discard()  # after commit: nothing to remove, the final file stays
    assert (tmp_path / "data.parquet").exists()
    with pytest.raises(RuntimeError, match="already committed"):
        f.commit()

    g = AtomicFile(tmp_path / "other.mp4")
    with open(g.tmp, "wb") as out:
        out.write(b"x")
    g.discard()
    assert _entries(tmp_path) == ["data.parquet"]


def test_atomic_file_as_context_manager(tmp_path):
    with pytest.raises(ValueError):
        with AtomicFile(tmp_path / "bad") as f:
            open(f.tmp, "wb").close()
            raise ValueError
    with AtomicFile(tmp_path / "good") as f:
        open(f.tmp, "wb").close()
    assert _entries(tmp_path) == ["good"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_mode_follows_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "f", b"x")
        with atomic_path(tmp_path / "g") as tmp:
            with open(tmp, "wb") as out:  # a writer that reopens the temp file keeps its mode
                out.write(b"y")
    finally:
        os.umask(old)
    for name in ("f", "g"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~umask


def _writer(path: str, fill: int, rounds: int, start) -> None:
    start.wait()
    for _ in range(rounds):
        atomic_write_bytes(path, bytes([fill]) * 200_000)


def test_concurrent_writers_from_two_processes(tmp_path):
    final = str(tmp_path / "shared.bin")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(final, fill, 30, start)) for fill in (1, 2)]
    for p in procs:
        p.start()
    start.set()
    deadline = time.monotonic() + 120
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:  # a reader sees whole contents only
        try:
            with open(final, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        assert data in (b"\x01" * 200_000, b"\x02" * 200_000)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    data = open(final, "rb").read()
    assert data in (b"\x01" * 200_000, b"\x02" * 200_000)
    assert _entries(tmp_path) == ["shared.bin"]


def test_fsync_commit_and_temp_files(tmp_path):
    final = tmp_path / "new" / "deeper" / "f.bin"
    f = AtomicFile(final)
    with open(f.tmp, "wb") as out:
        out.write(b"data")
    assert temp_files(tmp_path) == [f.tmp]
    f.commit(fsync=True)  # flushes the file, its directory and the directories it created
    assert final.read_bytes() == b"data" and temp_files(tmp_path) == []
    atomic_write_bytes(tmp_path / "g", b"x", fsync=True)
    with atomic_path(tmp_path / "h", fsync=True) as tmp:
        with open(tmp, "wb") as out:
            out.write(b"y")
    assert (tmp_path / "g").read_bytes() == b"x" and (tmp_path / "h").read_bytes() == b"y"
    assert is_temp_name(".f.bin.123.0123456789ab.tmp")
    assert not is_temp_name("f.bin.tmp") and not is_temp_name(".f.bin.x.0123456789ab.tmp")
