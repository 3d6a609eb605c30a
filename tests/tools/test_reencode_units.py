"""`reencode` in units (`tools.reencode_units`): the final step runs one array task at a time; a second one finds it
being finished (``pending``) or finished (``skipped``), never a work directory that went away under it."""

from __future__ import annotations

import pytest

from episodic.demo import write_demo_dataset
from episodic.tools.reencode import COPY_LOCK, WORK_DIR
from episodic.tools.reencode_units import encode_file, finish_copy, video_files
from episodic.writer.lock import DirectoryLock

SETTINGS = {"vcodec": "h264", "gop": 2, "crf": None, "pix_fmt": "yuv420p", "preset": None}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_demo_dataset(
        tmp_path_factory.mktemp("src") / "ds",
        num_episodes=2,
        min_length=6,
        max_length=8,
        height=32,
        width=48,
        progress=False,
    )


def test_a_final_step_waits_for_the_one_under_way_and_skips_a_finished_copy(source, tmp_path):
    dst = tmp_path / "copy"
    for rel in video_files(str(source)):
        assert encode_file(str(source), str(dst), rel, **SETTINGS)["status"] == "done"
    other = DirectoryLock.acquire(str(dst / COPY_LOCK), "the other array task's final step")
    try:
        got = finish_copy(str(source), str(dst), **SETTINGS)
    finally:
        other.release()
    assert got["status"] == "pending" and "being finished by another run" in got["detail"], got
    assert (dst / WORK_DIR).is_dir() and not (dst / "meta" / "info.json").exists()  # nothing done meanwhile

    assert finish_copy(str(source), str(dst), **SETTINGS)["status"] == "done"
    assert not (dst / WORK_DIR).exists() and not (dst / COPY_LOCK).exists()  # a finished copy: no lock left
    assert (dst / "meta" / "info.json").is_file()
    again = finish_copy(str(source), str(dst), **SETTINGS)  # the array task that comes second
    assert again["status"] == "skipped", again
    assert not (dst / COPY_LOCK).exists()
