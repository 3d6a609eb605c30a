"""Data for the tools' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from episodic.demo import write_demo_dataset


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> Path:
    """4 episodes of 20-30 frames, two 48x64 cameras."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("bench") / "ds",
        num_episodes=4,
        min_length=20,
        max_length=30,
        height=48,
        width=64,
        progress=False,
    )
