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


def test_bars_start_no_thread():
    """tqdm starts a monitor thread at its first bar (a disabled one too) that lives as long as the process; a
    process with live threads should not fork DataLoader workers. In a fresh interpreter: no thread after bars."""
    import subprocess
    import sys

    code = (
        "import io, threading\n"
        "from episodic.progress import bar\n"
        "for enabled in (False, True):\n"
        "    for _ in bar(range(3), enabled=enabled, file=io.StringIO()): pass\n"
        "print(sorted(t.name for t in threading.enumerate()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['MainThread']"
