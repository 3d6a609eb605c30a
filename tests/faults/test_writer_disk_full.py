"""A full disk while writing: a real small tmpfs (needs root), filled at different points of a session.

The bar: the error that reaches the user is the original one (ENOSPC), never one raised while cleaning up; no
temporary file is left; every episode whose add_episode returned is kept and `repair` (or `finalize` called
again) turns the directory into a dataset of exactly those episodes once there is space again.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from episodic.cli import main
from episodic.storage.atomic import temp_files
from episodic.tools.repair import repair
from episodic.writer import DatasetWriter
from episodic.writer.session import SESSION, directory_state

import writer_checks
import writer_child as wc

SEED = 4


class Tmpfs:
    """A tmpfs of a given size mounted on a fresh directory; `resize` changes its size in place."""

    def __init__(self, path: Path):
        self.path, self.mounted = path, False

    def mount(self, size_kb: int) -> Path:
        out = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(self.path)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill up ({out.stderr.strip() or out.returncode})")
        self.mounted = True
        return self.path

    def resize(self, size_kb: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size_kb}k", str(self.path)], check=True, capture_output=True)

    def fill(self, leave_bytes: int) -> Path:
        """A filler file taking all free space but `leave_bytes`."""
        st = os.statvfs(self.path)
        filler = self.path / "filler"
        with open(filler, "wb") as f:
            f.truncate(0)
            f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_bytes))
        return filler

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False


@pytest.fixture()
def tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip(f"disk-full tests mount a small tmpfs, which needs root; running as uid {os.geteuid()}")
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command to mount a small tmpfs")
    fs = Tmpfs(tmp_path / "mnt")
    fs.path.mkdir()
    yield fs
    fs.unmount()


def _is_enospc(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno == errno.ENOSPC


@pytest.mark.parametrize("size_kb", [64, 96, 200, 320])  # full while: encoding, journal, joining an mp4, a segment
def test_disk_full_while_adding(tmpfs, size_kb, capsys):
    """Add episodes until the disk is full (at a different point of an episode or of a join for each size);
    the original error comes out of the `with` block; then repair on the still-full disk fails cleanly or
    works, and after the disk grows it recovers every returned episode."""
    root = tmpfs.mount(size_kb) / "ds"
    returned = []
    with pytest.raises(OSError) as caught:
        with DatasetWriter(root, features=wc.features(), **wc.WRITER_OPTIONS) as w:
            for ep in range(200):
                w.add_episode(wc.episode(SEED, ep), task=wc.task_of(ep))
                returned.append(ep)
    assert _is_enospc(caught.value), repr(caught.value)
    assert returned, "the disk was too small for a single episode"
    assert not temp_files(root) and not writer_checks.open_files_under(root)
    assert directory_state(str(root)) == SESSION

    code = main(["repair", str(root)])  # the disk is still full: a clean error or a repair, never garbage
    err = capsys.readouterr().err
    if code != 0:
        assert code == 2 and "No space left" in err and "run repair again" in err, err
        assert not temp_files(root) and not writer_checks.open_files_under(root)
        assert directory_state(str(root)) == SESSION
        tmpfs.resize(8192)
        assert repair(root).repaired
    found = writer_checks.count_episodes(root)
    assert found == len(returned)  # nothing beyond the episodes that returned: the failed one was dropped
    writer_checks.assert_layout(root)
    writer_checks.assert_episodes(root, SEED, found)


@pytest.mark.parametrize("leave_kb", [0, 25, 48])  # full while: joining the data file, writing metadata; not full
def test_disk_full_in_finalize_then_finalize_again(tmpfs, leave_kb):
    """All episodes added, then the disk fills up before finalize: finalize raises the original error (or
    works when enough was left), leaves no temporary file, and works when called again with space."""
    root = tmpfs.mount(4096) / "ds"
    w = DatasetWriter(root, features=wc.features(), **wc.WRITER_OPTIONS)
    for ep in range(7):
        w.add_episode(wc.episode(SEED, ep), task=wc.task_of(ep))
    filler = tmpfs.fill(leave_kb * 1024)
    try:
        w.finalize()
        failed = False
    except OSError as e:
        assert _is_enospc(e), repr(e)
        failed = True
        assert not temp_files(root) and not writer_checks.open_files_under(root)
        assert not (root / "meta" / "info.json").exists()
        filler.unlink()
        assert w.finalize() == str(root)
    if leave_kb == 0:
        assert failed
    filler.unlink(missing_ok=True)
    writer_checks.assert_layout(root)
    writer_checks.assert_episodes(root, SEED, 7)
