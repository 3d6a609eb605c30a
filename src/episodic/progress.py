"""Progress bars, one policy for all of episodic: a bar shows only when the caller asks for one
(`enabled`), its output is a terminal (tqdm's `disable=None`), and `$EPISODIC_PROGRESS` is not `0`
(`episodic.config.progress_allowed`). Library code calls `bar(...)`, never tqdm directly."""

from __future__ import annotations

from typing import Any

from . import config

__all__ = ["bar"]


def bar(iterable: Any = None, *, enabled: bool = True, **kwargs: Any):
    """A tqdm bar over `iterable` (or a manual one with total=...): silent unless enabled, on a terminal,
    and allowed by $EPISODIC_PROGRESS."""
    from tqdm.auto import tqdm

    disable = None if enabled and config.progress_allowed() else True
    return tqdm(iterable, disable=disable, **kwargs)
