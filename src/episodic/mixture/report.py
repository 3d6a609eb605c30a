"""What preflight found: one `EntryReport` per entry, every `Problem`, the shares, and the table.

`PreflightReport.table()` is what ``episodic mixture check`` prints: entry, format version, episodes and frames
selected, cameras (roles), state/action dimensions, fps, weight and effective share. No torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..format.errors import MixturePreflightError
from .spec import MixtureSpec

__all__ = ["EntryReport", "PreflightReport", "Problem"]


@dataclass(frozen=True)
class Problem:
    """One problem of one entry (`entry` -1: of the whole mixture). `field` is where in the entry (``roles.wrist``,
    ``episodes``, ``delta_timestamps.action``, ``source`` ...); `suggestions` the closest existing keys."""

    entry: int
    name: str
    field: str
    message: str
    severity: str = "error"  # or "warning"
    suggestions: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f"entry {self.entry} ({self.name})" if self.entry >= 0 else "mixture"
        hint = f" (closest: {', '.join(repr(s) for s in self.suggestions)})" if self.suggestions else ""
        return f"{where}: {self.field}: {self.message}{hint}"


@dataclass(frozen=True)
class EntryReport:
    """The facts preflight established about one entry (zeros/empties where its metadata could not be read)."""

    index: int
    name: str
    source: str
    status: str = "ok"  # "ok", "error" (kept: on_error="raise") or "skipped"
    version: str = ""
    fps: int = 0
    robot_type: str | None = None
    group: str | None = None
    total_episodes: int = 0
    episodes: int = 0  # selected
    frames: int = 0  # selected
    cameras: Mapping[str, str] = field(default_factory=dict)  # role -> key
    camera_shapes: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)  # role -> (h, w, c)
    state_key: str | None = None
    state_dim: int = 0  # after state_indices
    action_key: str | None = None
    action_dim: int = 0
    task_key: str | None = None
    delta_offsets: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # role -> frame offsets
    tolerance_s: float = 0.0
    delta_rounding_s: float = 0.0  # largest shift of a window time to this entry's fps grid
    weight: float = 0.0  # raw weight under the rule
    share: float = 0.0  # effective share (0 when skipped)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("cameras", "delta_offsets"):
            out[k] = {r: list(v) if isinstance(v, tuple) else v for r, v in out[k].items()}
        out["camera_shapes"] = {r: list(v) for r, v in self.camera_shapes.items()}
        return out


@dataclass(frozen=True)
class PreflightReport:
    """Every entry's facts and every problem, the entries skipped (``on_error="skip"``) and the time taken.
    `sources` and `metadata` hold what was loaded (None where it failed), so nothing is fetched twice;
    `metadata_files` (``preflight(keep_files=True)``, else empty) the metadata files of URL entries as read."""

    spec: MixtureSpec
    entries: tuple[EntryReport, ...]
    problems: tuple[Problem, ...]
    on_error: str
    seconds: float = 0.0
    sources: tuple = field(default=(), repr=False, compare=False)
    metadata: tuple = field(default=(), repr=False, compare=False)
    metadata_files: tuple = field(default=(), repr=False, compare=False)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity != "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def skipped(self) -> list[str]:
        return [e.name for e in self.entries if e.status == "skipped"]

    @property
    def shares(self) -> list[float]:
        return [e.share for e in self.entries]

    def problems_of(self, index: int) -> list[Problem]:
        return [p for p in self.problems if p.entry == index]

    def summary(self) -> str:
        used = [e for e in self.entries if e.status != "skipped"]
        text = (f"{len(self.entries)} entries, {sum(e.episodes for e in used)} episodes, {sum(e.frames for e in used)} "
                f"frames; {len(self.errors)} error(s), {len(self.warnings)} warning(s); checked in {self.seconds:.2f} s")
        if self.skipped:
            text += (f"\nskipped ({len(self.skipped)}): {', '.join(self.skipped)} -- their share is re-spread over the "
                     "other entries in proportion to their shares")
        return text

    def message(self) -> str:
        """The summary and every problem, one a line."""
        lines = [self.summary()] + [f"  - {p}" for p in self.errors] + [f"  - warning: {p}" for p in self.warnings]
        return "\n".join(lines)

    def raise_for_errors(self) -> None:
        """MixturePreflightError listing every problem, when there is an error."""
        if self.errors:
            raise MixturePreflightError(f"{self.spec.origin}: mixture preflight failed: {self.message()}", self)

    def table(self) -> str:
        heads = ("#", "entry", "status", "ver", "episodes", "frames", "cameras", "state/action", "fps", "weight", "share")
        rows = []
        for e in self.entries:
            cams = f"{len(e.cameras)} ({','.join(e.cameras)})" if e.cameras else "0"
            rows.append((str(e.index), e.name, e.status, e.version, str(e.episodes), str(e.frames), cams,
                         f"{e.state_dim}/{e.action_dim}", str(e.fps), f"{e.weight:.4g}", f"{100 * e.share:.3g}%"))
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
        right = {0, 4, 5, 8, 9, 10}

        def line(cells):
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        return "\n".join([line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows])

    def to_dict(self) -> dict[str, Any]:
        return {"origin": self.spec.origin, "on_error": self.on_error, "ok": self.ok, "seconds": self.seconds,
                "skipped": self.skipped, "entries": [e.to_dict() for e in self.entries],
                "problems": [{"entry": p.entry, "name": p.name, "field": p.field, "message": p.message,
                              "severity": p.severity, "suggestions": list(p.suggestions)} for p in self.problems],
                "ignored": list(self.spec.ignored)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)
