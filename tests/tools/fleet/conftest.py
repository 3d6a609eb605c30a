"""Data for the fleet tools' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_checks import as_v21
from support import FIXTURES


@pytest.fixture(scope="session")
def lerobot_v21(tmp_path_factory) -> Path:
    """LeRobot 0.4.4's multi-file AV1 fixture (12 episodes, 2 cameras) in the v2.1 layout."""
    return as_v21(FIXTURES / "lerobot_multifile_av1/dataset", tmp_path_factory.mktemp("lerobot_v21") / "ds")


@pytest.fixture(scope="session")
def fleet_sources(synthetic, tmp_path_factory) -> list[str]:
    """24 datasets written by episodic's writer (v3.0 and, every 4th from the third, v2.1: the session's 12
    synthetic ones and a copy of each under another name) and, last, a broken one (a camera's videos missing)."""
    import shutil

    root = tmp_path_factory.mktemp("fleet")
    out = [d.path for d in synthetic]
    for d in synthetic:
        copy = root / f"copy-{Path(d.path).name}"
        shutil.copytree(d.path, copy)
        out.append(str(copy))
    broken = root / "broken"
    shutil.copytree(synthetic[0].path, broken)
    shutil.rmtree(next((broken / "videos").iterdir()))
    return out + [str(broken)]
