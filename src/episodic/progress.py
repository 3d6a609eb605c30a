"""Progress bars, one policy for all of episodic: a bar shows only when the caller asks for one
(`enabled`), its output is a terminal (tqdm's `disable=None`), and `$EPISODIC_PROGRESS` is not `0`
(`episodic.config.progress_allowed`). Library code calls `bar(...)`, never tqdm directly."""

from __future__ import annotations

from typing import Any

from . import config

__all__ = ["bar"]


_BAR: list = []  # the bar class, made once


def _bar_class() -> type:
    """tqdm's (tqdm.auto: a notebook's where there is one) without its monitor thread: tqdm starts a thread that
    lives as long as the process at the first bar, even a disabled one, and a process with a live thread should
    not fork (DataLoader workers; see runtime.py). The monitor only shortens the redraw delay of bars whose
    iterations slow down."""
    if not _BAR:
        from tqdm.auto import tqdm

        _BAR.append(type("Bar", (tqdm,), {"monitor_interval": 0}))
    return _BAR[0]


def bar(iterable: Any = None, *, enabled: bool = True, **kwargs: Any):
    """A tqdm bar over `iterable` (or a manual one with total=...): silent unless enabled, on a terminal,
    and allowed by $EPISODIC_PROGRESS. Starts no thread."""
    disable = None if enabled and config.progress_allowed() else True
    return _bar_class()(iterable, disable=disable, **kwargs)
