"""A mixture spec: which datasets, how much of each, and how their keys map to shared roles.

As a file (JSON, or YAML with PyYAML installed; ``{"$ref": "file.json"}`` includes, `mixture.refs`)::

    weighting: {rule: temperature, alpha: 0.5}   # frames (default) | episodes | uniform | temperature | explicit
    tolerance_s: 0.0001
    delta_timestamps: {action: [0.0, 0.1, 0.2], state: [0.0]}   # by role, seconds
    delta_rounding: nearest                      # or exact (LeRobot's rule: on each entry's fps grid)
    roles: {state: observation.state, action: action, task: task}   # defaults for every entry
    on_unknown_task: warn                        # or raise: rows whose task_index the tasks table lacks
    eval_split: {fraction: 0.05, rule: stratified, seed: 0}   # episodes held out per entry and task (optional)
    target_fps: 30                               # one control rate: every entry's rows resampled to it (optional)
    resample: {action: linear, state: nearest}   # per role: nearest (default) | previous | linear
    entries:
      - source: lerobot/svla_so101_pickplace     # Hub repo id, local path or fsspec URL
        revision: 3c8e1d0a...                    # tag, branch or commit SHA (Hub only)
        root: /data/hub/svla_so101_pickplace     # optional local copy of a Hub dataset (default: the cache)
        roles: {front: observation.images.up, wrist: observation.images.side}
        exclude_episodes: [3, 7]
        weight: 2.0
      - source: s3://bucket/datasets/koch_pick
        name: koch                               # unique; default: the source (+ "#2", "#3" when repeated)
        episodes: [0, 1, 2, 3]
        state_indices: [0, 1, 2, 3, 4, 5]
        tolerance_s: 0.001
        delta_timestamps: {action: [0.0, 0.05, 0.1], state: [0.0]}  # replaces the mixture's (same steps per role)

or as objects (`MixtureSpec(entries=(MixtureEntry(...), ...))`). OpenTau's mixture configs
(``{"datasets": [...], "weights": [...]}``) load as they are (`mixture.opentau`).

Roles: ``state``, ``action`` and ``task`` are reserved; every other role names a camera (``wrist``,
``front``, ...: the same role is the same camera slot in every entry, whatever the entry's key or key order).
An entry's roles are the mixture's ``roles`` updated by its own; ``null`` removes a role, its default included.
An entry that names no camera role (none mapped, none removed) gets every camera of its dataset, each under its
key's last dotted part (``observation.images.top`` -> ``top``); without ``state``/``action`` roles,
``observation.state``/``action`` are used when the dataset has them (``state: null`` / ``action: null``: the
entry has none); ``task`` defaults to ``task`` (the episode's task text; ``task: null``: the text is "").

Windows: ``delta_timestamps`` are seconds, turned into frame offsets with each entry's own fps: rounded to the
nearest frame (``nearest``; preflight reports the largest shift) or required to lie on the entry's frame grid
within its ``tolerance_s`` (``exact``).

Tasks: an entry's rows whose ``task_index`` its tasks table lacks (metadata drift) get the task ``""``, with
one warning per entry naming the episodes and task indices (``on_unknown_task: warn``, the default); ``raise``
refuses them (`DatasetFormatError` when the entry's rows are read). `preflight` warns from the metadata.

Eval split (``eval_split``: `order.eval_split.EvalSplit`) and control rate (``target_fps``, ``resample``:
`tabular.resample`): docs/mixtures.md; preflight's sizes and shares are the training side's, in resampled frames.

Weights: each entry's size under the rule (frames or episodes of its selected episodes, 1 for uniform,
frames ** alpha for temperature) times its ``weight`` (default 1), normalised; ``explicit`` uses the weights
alone and needs one on every entry. Every spec problem is collected and raised together (`MixtureSpecError`),
each naming the file, the entry and the field; unknown fields get the closest known names as suggestions (the
checks: `spec_checks`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...order.eval_split import EvalSplit

__all__ = ["MixtureEntry", "MixtureSpec", "Weighting", "RESERVED_ROLES", "WEIGHT_RULES", "ON_ERROR", "load_spec"]

RESERVED_ROLES = ("state", "action", "task")
WEIGHT_RULES = ("frames", "episodes", "uniform", "temperature", "explicit")
ON_ERROR = ("raise", "skip")
DEFAULT_TOLERANCE_S = 1e-4


@dataclass(frozen=True)
class Weighting:
    """How entry weights are derived: `rule` in WEIGHT_RULES; `alpha` in [0, 1] for ``temperature``
    (``size ** alpha``: 0 is uniform, 1 proportional), `size` (``frames`` or ``episodes``) what it raises."""

    rule: str = "frames"
    alpha: float = 1.0
    size: str = "frames"


@dataclass(frozen=True)
class MixtureEntry:
    """One dataset of a mixture (see the module docstring for the fields)."""

    source: str
    name: str | None = None
    revision: str | None = None
    episodes: tuple[int, ...] | None = None
    exclude_episodes: tuple[int, ...] = ()
    weight: float | None = None
    roles: Mapping[str, str | None] | None = None
    state_indices: tuple[int, ...] | None = None
    action_indices: tuple[int, ...] | None = None
    tolerance_s: float | None = None
    delta_timestamps: Mapping[str, tuple[float, ...]] | None = None
    group: str | None = None
    storage_options: Mapping[str, Any] | None = None
    root: str | None = None  # a Hub dataset's local copy (read when it has meta/info.json, else downloaded there)

    @property
    def label(self) -> str:
        return self.name or self.source


@dataclass(frozen=True)
class MixtureSpec:
    """A whole mixture. `entries` get unique names when built (`MixtureSpec.build` / `load_spec`)."""

    entries: tuple[MixtureEntry, ...]
    weighting: Weighting = field(default_factory=Weighting)
    roles: Mapping[str, str | None] = field(default_factory=dict)
    tolerance_s: float = DEFAULT_TOLERANCE_S
    delta_timestamps: Mapping[str, tuple[float, ...]] | None = None
    delta_rounding: str = "nearest"
    on_error: str = "raise"
    on_unknown_task: str = "warn"
    samples_per_epoch: int | None = None
    max_state_dim: int | None = None
    max_action_dim: int | None = None
    camera_role_style: str = "names"
    eval_split: EvalSplit | None = None
    target_fps: int | None = None
    resample: Mapping[str, str] | None = None  # role (state, action) -> rule
    origin: str = "<objects>"  # the file it came from, for messages
    ignored: tuple[str, ...] = ()  # fields of a foreign format that were read but play no part

    @classmethod
    def build(cls, entries: Sequence[MixtureEntry], **options) -> MixtureSpec:
        """A checked spec from objects: every problem raised together, names filled in."""
        from .spec_checks import checked_spec, raise_problems

        origin = options.pop("origin", "<objects>")
        problems: list[str] = []
        spec = checked_spec(cls(entries=tuple(entries), origin=origin, **options), problems)
        raise_problems(problems, origin)
        return spec

    @classmethod
    def from_dict(cls, raw: Any, origin: str = "<dict>") -> MixtureSpec:
        """A spec from parsed JSON/YAML: episodic's format (``entries``) or OpenTau's (``datasets``, also inside
        a training config's ``dataset_mixture``)."""
        if isinstance(raw, Mapping) and ("datasets" in raw or "dataset_mixture" in raw):
            from .opentau import from_opentau

            return from_opentau(raw, origin)
        from .spec_checks import checked_spec, parse_spec, raise_problems

        problems: list[str] = []
        spec = parse_spec(raw, origin, problems)
        if spec is not None:
            spec = checked_spec(spec, problems)
        raise_problems(problems, origin)
        assert spec is not None, "parse_spec lists a problem when it gives no spec (raised above)"
        return spec

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> MixtureSpec:
        from .refs import resolve_refs

        return cls.from_dict(resolve_refs(path), origin=str(Path(path)))

    def entry_roles(self, entry: MixtureEntry) -> dict[str, str]:
        """The entry's explicit roles: the mixture's defaults updated by its own (``None`` values removed)."""
        merged = {**dict(self.roles), **dict(entry.roles or {})}
        return {k: v for k, v in merged.items() if v is not None}

    def entry_removed_roles(self, entry: MixtureEntry) -> set[str]:
        """The roles the entry's merged roles map to ``null``: removed, defaults included (no camera defaults when
        a camera role is removed, no ``observation.state``/``action`` for a removed ``state``/``action``, task
        text "" for a removed ``task``)."""
        merged = {**dict(self.roles), **dict(entry.roles or {})}
        return {k for k, v in merged.items() if v is None}

    def entry_delta_timestamps(self, entry: MixtureEntry) -> dict[str, tuple[float, ...]]:
        return dict(entry.delta_timestamps if entry.delta_timestamps is not None else (self.delta_timestamps or {}))

    def entry_tolerance_s(self, entry: MixtureEntry) -> float:
        return self.tolerance_s if entry.tolerance_s is None else entry.tolerance_s

    def to_dict(self) -> dict:
        """The spec in episodic's file format (loads back with `from_dict`)."""
        out: dict[str, Any] = {
            "weighting": {"rule": self.weighting.rule, "alpha": self.weighting.alpha, "size": self.weighting.size},
            "tolerance_s": self.tolerance_s,
            "delta_rounding": self.delta_rounding,
            "on_error": self.on_error,
            "on_unknown_task": self.on_unknown_task,
        }
        for key in ("samples_per_epoch", "max_state_dim", "max_action_dim"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.roles:
            out["roles"] = dict(self.roles)
        if self.delta_timestamps is not None:
            out["delta_timestamps"] = {k: list(v) for k, v in self.delta_timestamps.items()}
        if self.camera_role_style != "names":
            out["camera_role_style"] = self.camera_role_style
        if self.eval_split is not None:
            out["eval_split"] = self.eval_split.to_dict()
        if self.target_fps is not None:
            out["target_fps"] = self.target_fps
        if self.resample:
            out["resample"] = dict(self.resample)
        entries = []
        for e in self.entries:
            d: dict[str, Any] = {"source": e.source, "name": e.name}
            for f in fields(MixtureEntry):
                v = getattr(e, f.name)
                if f.name in d or v is None or v == ():
                    continue
                if isinstance(v, tuple):
                    v = list(v)
                elif f.name == "delta_timestamps":
                    v = {k: list(x) for k, x in v.items()}
                elif isinstance(v, Mapping):
                    v = dict(v)
                d[f.name] = v
            entries.append(d)
        out["entries"] = entries
        return out


def load_spec(spec: MixtureSpec | Mapping | str | os.PathLike) -> MixtureSpec:
    """A `MixtureSpec` from a spec, a parsed dict, or a JSON/YAML file path."""
    if isinstance(spec, MixtureSpec):
        return spec
    if isinstance(spec, Mapping):
        return MixtureSpec.from_dict(spec)
    return MixtureSpec.from_file(spec)
