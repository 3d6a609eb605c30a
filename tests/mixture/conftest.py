"""Tiny heterogeneous datasets written by episodic's writer (v3.0 and v2.1, 1-4 cameras, dims 6-14, fps 10-50)."""

from __future__ import annotations

import pytest

from episodic.mixture.synthetic import write_synthetic_datasets


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """12 datasets (every 4th from the third in v2.1), each 2-4 episodes of 5-16 frames with real tiny mp4s."""
    return write_synthetic_datasets(tmp_path_factory.mktemp("mixture"), 12, seed=1)


@pytest.fixture()
def served(synthetic):
    """The synthetic datasets served over HTTP on 127.0.0.1 (`support.FaultServer`: request counts, faults)."""
    from pathlib import Path

    from support import FaultServer

    with FaultServer(Path(synthetic[0].path).parent) as srv:
        yield srv
