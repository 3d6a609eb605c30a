"""Shared test data: small datasets written by episodic's own writer, once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from episodic.demo import write_demo_dataset

from support import FIXTURES, LEROBOT_FIXTURE, FaultServer  # noqa: F401 (re-exported for tests)


@pytest.fixture(scope="session")
def small_root(tmp_path_factory) -> Path:
    """6 episodes of 12-30 frames, two 48x64 AV1 cameras, one file each."""
    return write_demo_dataset(tmp_path_factory.mktemp("small") / "ds", num_episodes=6, min_length=12, max_length=30,
                              height=48, width=64, progress=False)


@pytest.fixture(scope="session")
def multifile_root(tmp_path_factory) -> Path:
    """12 episodes rotated into many data/video files and several chunk directories."""
    return write_demo_dataset(tmp_path_factory.mktemp("multi") / "ds", num_episodes=12, min_length=10, max_length=25,
                              height=48, width=64, progress=False, data_files_size_in_mb=0.004,
                              video_files_size_in_mb=0.006, chunks_size=3, seed=1)


@pytest.fixture()
def copy_of(tmp_path):
    """copy_of(root) -> a writable copy of a dataset directory."""
    import shutil

    def make(root: os.PathLike) -> Path:
        dst = tmp_path / f"copy-{Path(root).name}"
        shutil.copytree(root, dst)
        return dst

    return make


@pytest.fixture()
def http_server(small_root):
    """`small_root`'s parent served by the fault-injecting HTTP server (tests/support.py), no Range support."""
    with FaultServer(small_root.parent, ranges=False) as server:
        yield server


@pytest.fixture()
def http_root(http_server, small_root) -> str:
    """The URL of `small_root` on `http_server`."""
    return f"{http_server.url}/{small_root.name}"
