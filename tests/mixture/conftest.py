"""Mixture test fixtures (the `synthetic` datasets themselves come from tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture()
def served(synthetic):
    """The synthetic datasets served over HTTP on 127.0.0.1 (`support.FaultServer`: request counts, faults)."""
    from pathlib import Path

    from support import FaultServer

    with FaultServer(Path(synthetic[0].path).parent) as srv:
        yield srv
