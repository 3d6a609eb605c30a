"""What preflight found: one `EntryReport` per entry, every `Problem`, the shares, and the table.

`PreflightReport.table()` is what ``episodic mixture check`` prints: entry, format version, episodes and frames
selected, cameras (roles), state/action dimensions, fps, weight and effective share. No torch.

`EntryReport.from_dict` and `Problem.from_dict` read back what `to_dict` wrote (the start-up's hand-over, JSON),
every field checked for its type and range: a missing, unknown or mistyped field raises ValueError naming it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...format.errors import MixturePreflightError
from .spec import MixtureSpec

__all__ = ["EntryReport", "PreflightReport", "Problem"]

STATUSES = ("ok", "error", "skipped")
SEVERITIES = ("error", "warning")
_LIMIT = 2**62


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return _is_int(v) and 0 <= v < _LIMIT


def _real(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v) and 0 <= v < _LIMIT


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _opt_text(v: Any) -> bool:
    return v is None or isinstance(v, str)


def _mapping_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(isinstance(k, str) and check(x) for k, x in v.items())


def _list_of(check: Callable[[Any], bool], length: int | None = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and (length is None or len(v) == length) and all(check(x) for x in v)


def _checked_fields(raw: Any, checks: Mapping[str, tuple[Callable[[Any], bool], str]], where: str) -> dict:
    """`raw` (a JSON object) when it has exactly the fields of `checks`, each passing its check; else ValueError
    naming `where`, the field and what it must be."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(checks), key=str)
    missing = [k for k in checks if k not in raw]
    if unknown or missing:
        raise ValueError(
            f"{where}: "
            + "; ".join(
                ([f"unknown field(s) {unknown}"] if unknown else [])
                + ([f"missing field(s) {missing}"] if missing else [])
            )
        )
    for name, (check, want) in checks.items():
        if not check(raw[name]):
            raise ValueError(f"{where}: field {name!r} must be {want}, got {_short(raw[name])}")
    return raw


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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

    @classmethod
    def from_dict(cls, raw: Any, where: str = "problem") -> Problem:
        """A problem from `PreflightReport.to_dict`'s form, checked (see the module docstring)."""
        raw = _checked_fields(raw, _PROBLEM_FIELDS, where)
        return cls(raw["entry"], raw["name"], raw["field"], raw["message"], raw["severity"], tuple(raw["suggestions"]))

    def to_dict(self) -> dict:
        return {
            "entry": self.entry,
            "name": self.name,
            "field": self.field,
            "message": self.message,
            "severity": self.severity,
            "suggestions": list(self.suggestions),
        }

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
    frames: int = 0  # selected (the training side's, with an eval split)
    eval_episodes: int = 0  # held out by the spec's eval split
    eval_frames: int = 0
    cameras: Mapping[str, str] = field(default_factory=dict)  # role -> key
    camera_shapes: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)  # role -> (h, w, c)
    depth_roles: tuple[str, ...] = ()  # camera roles that are depth cameras (`format.depth`)
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
        out["depth_roles"] = list(self.depth_roles)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "entry") -> EntryReport:
        """An entry's facts from `to_dict`'s form, checked (see the module docstring); a report saved before depth
        cameras were known has no ``depth_roles``: none."""
        if isinstance(raw, dict) and "depth_roles" not in raw:
            raw = {**raw, "depth_roles": []}
        raw = dict(_checked_fields(raw, _ENTRY_FIELDS, where))
        raw["cameras"] = dict(raw["cameras"])
        raw["camera_shapes"] = {r: tuple(v) for r, v in raw["camera_shapes"].items()}
        raw["depth_roles"] = tuple(raw["depth_roles"])
        raw["delta_offsets"] = {r: tuple(v) for r, v in raw["delta_offsets"].items()}
        return cls(**raw)


_PROBLEM_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "entry": (lambda v: _is_int(v) and -1 <= v < _LIMIT, "an entry index (-1: the mixture)"),
    "name": (_text, "a string"),
    "field": (_text, "a string"),
    "message": (_text, "a string"),
    "severity": (lambda v: v in SEVERITIES, f"one of {SEVERITIES}"),
    "suggestions": (_list_of(_text), "a list of strings"),
}
_ENTRY_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "index": (_count, "an entry index"),
    "name": (_text, "a string"),
    "source": (_text, "a string"),
    "status": (lambda v: v in STATUSES, f"one of {STATUSES}"),
    "version": (_text, "a string"),
    "fps": (_count, "an int >= 0"),
    "robot_type": (_opt_text, "a string or null"),
    "group": (_opt_text, "a string or null"),
    "total_episodes": (_count, "an int >= 0"),
    "episodes": (_count, "an int >= 0"),
    "frames": (_count, "an int >= 0"),
    "eval_episodes": (_count, "an int >= 0"),
    "eval_frames": (_count, "an int >= 0"),
    "cameras": (_mapping_of(_text), "an object of role -> feature key"),
    "camera_shapes": (_mapping_of(_list_of(_count, 3)), "an object of role -> [height, width, channels]"),
    "depth_roles": (_list_of(_text), "a list of camera roles"),
    "state_key": (_opt_text, "a string or null"),
    "state_dim": (_count, "an int >= 0"),
    "action_key": (_opt_text, "a string or null"),
    "action_dim": (_count, "an int >= 0"),
    "task_key": (_opt_text, "a string or null"),
    "delta_offsets": (
        _mapping_of(_list_of(lambda v: _is_int(v) and -_LIMIT < v < _LIMIT)),
        "an object of role -> list of frame offsets",
    ),
    "tolerance_s": (_real, "a finite number >= 0"),
    "delta_rounding_s": (_real, "a finite number >= 0"),
    "weight": (_real, "a finite number >= 0"),
    "share": (lambda v: _real(v) and v <= 1, "a number in [0, 1]"),
}


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
        held = ""
        if self.spec.eval_split is not None:
            held = (
                f" to train on, {sum(e.eval_episodes for e in used)} episodes and {sum(e.eval_frames for e in used)} "
                f"frames held out ({self.spec.eval_split.rule} eval split of {self.spec.eval_split.fraction:g})"
            )
        text = (
            f"{len(self.entries)} entries, {sum(e.episodes for e in used)} episodes, {sum(e.frames for e in used)} "
            f"frames{held}; {len(self.errors)} error(s), {len(self.warnings)} warning(s); checked in "
            f"{self.seconds:.2f} s"
        )
        if self.skipped:
            text += (
                f"\nskipped ({len(self.skipped)}): {', '.join(self.skipped)} -- their share is re-spread over the "
                "other entries in proportion to their shares"
            )
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
        """The entries one a line; with the spec's eval split, the episodes and frames held out ("held out") next
        to the training side's (episodes, frames); with a ``target_fps``, frames are resampled ones and the fps
        column reads ``own->target``."""
        split = self.spec.eval_split is not None
        heads = (
            "#",
            "entry",
            "status",
            "ver",
            "episodes",
            "frames",
            *(("held out",) if split else ()),
            "cameras",
            "state/action",
            "fps",
            "weight",
            "share",
        )
        target = self.spec.target_fps
        rows = []

        def fps(e: EntryReport) -> str:  # an entry's own rate, and the control rate its rows are resampled to
            return str(e.fps) if target is None or target == e.fps or not e.fps else f"{e.fps}->{target}"

        for e in self.entries:
            cams = f"{len(e.cameras)} ({','.join(e.cameras)})" if e.cameras else "0"
            held = (f"{e.eval_episodes}/{e.eval_frames}",) if split else ()
            rows.append(
                (
                    str(e.index),
                    e.name,
                    e.status,
                    e.version,
                    str(e.episodes),
                    str(e.frames),
                    *held,
                    cams,
                    f"{e.state_dim}/{e.action_dim}",
                    fps(e),
                    f"{e.weight:.4g}",
                    f"{100 * e.share:.3g}%",
                )
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
        right = {0, 4, 5, *((6,) if split else ()), *(i + split for i in (8, 9, 10))}

        def line(cells):
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        return "\n".join([line(heads), line(["-" * w for w in widths])] + [line(r) for r in rows])

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.spec.origin,
            "on_error": self.on_error,
            "ok": self.ok,
            "seconds": self.seconds,
            "skipped": self.skipped,
            "entries": [e.to_dict() for e in self.entries],
            "problems": [p.to_dict() for p in self.problems],
            "ignored": list(self.spec.ignored),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)
