"""progress.py: bars show only when asked for, on a terminal, and unless EPISODIC_PROGRESS=0."""

from __future__ import annotations

import io

import pytest

from episodic.progress import bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn(enabled: bool, out: io.StringIO) -> str:
    for _ in bar(range(3), enabled=enabled, desc="work", file=out):
        pass
    return out.getvalue()


def test_bar_draws_on_a_terminal(monkeypatch):
    monkeypatch.delenv("EPISODIC_PROGRESS", raising=False)
    assert "work" in _drawn(True, _Terminal())


def test_bar_is_silent_off_a_terminal(monkeypatch):
    monkeypatch.delenv("EPISODIC_PROGRESS", raising=False)
    assert _drawn(True, io.StringIO()) == ""


@pytest.mark.parametrize("value", ["0", "off", "false"])
def test_environment_switch_silences_every_bar(monkeypatch, value):
    monkeypatch.setenv("EPISODIC_PROGRESS", value)
    assert _drawn(True, _Terminal()) == ""


def test_caller_can_turn_a_bar_off(monkeypatch):
    monkeypatch.delenv("EPISODIC_PROGRESS", raising=False)
    assert _drawn(False, _Terminal()) == ""


def test_bar_yields_every_item(monkeypatch):
    monkeypatch.setenv("EPISODIC_PROGRESS", "0")
    assert list(bar(iter("abc"))) == ["a", "b", "c"]
