"""The shared layout of a mixture's items: which keys every item has, at which shapes, and where each entry's
values come from. Built from a preflight report (no data read); numpy only.

Every item of every entry has the same keys, shapes and dtypes, so torch's `default_collate` stacks items of
different entries:

- ``observation.images.<role>`` for every camera role of the mixture (the union over its entries, in order of
  first appearance): (C, H, W) (with a window of T steps for the role: (T, C, H, W)) at the mixture's
  ``image_size`` (H, W). ``observation.images.<role>_is_pad``: bool, () (or (T,)): True where the frame is
  padding, i.e. the entry has no camera in that role (its frames are zeros) or the window step lies outside
  the episode.
- a depth camera role (`format.depth`: the role's cameras are depth maps in every entry that has it; a role that
  is a depth camera in one entry and a colour camera in another is an error) is (1, H, W) float32 distances in the
  mixture's ``depth_unit`` ("mm" or "m"), whatever ``return_uint8``; resized by nearest pixel.
- ``observation.state``: float32 (D,) (or (T, D)), D the largest state dimension of the mixture (after each
  entry's ``state_indices``); an entry's values fill the first d dimensions, the rest are 0.
  ``observation.state_mask``: bool (D,), True on the entry's d real dimensions (all False when the entry has
  no state). ``observation.state_is_pad`` (T,) with a window (all True when the entry has no state).
  The same for ``action`` / ``action_mask`` / ``action_is_pad``. Keys are left out when no entry has the role.
- ``task`` (text), ``dataset_index`` (int64: the entry's position in the spec), ``dataset_name`` (text: the
  entry's name), and the entry's own ``episode_index``, ``frame_index``, ``index`` (int64) and ``timestamp``
  (float32) of the frame.

One role has one window length in every entry that has it (``delta_timestamps`` are seconds, turned into
frames with each entry's fps by preflight); entries that disagree are an error (`MixtureLayoutError`, every
problem listed). Cameras of several sizes need an ``image_size``: frames are brought to it by the decoder-side
resize (``resize_mode``: ``stretch``, the default, or ``letterbox``; `episodic.video.output`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..format.depth import check_unit
from ..format.errors import MixtureLayoutError
from ..format.timebase import frames_to_seconds
from ..video.output import RESIZE_MODES, check_image_size
from .checking.report import PreflightReport

__all__ = ["EntryLayout", "MixtureLayout", "camera_key"]

STATE, ACTION = "observation.state", "action"
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # read from every entry


def camera_key(role: str) -> str:
    """The item key of camera role `role`."""
    return f"observation.images.{role}"


@dataclass(frozen=True)
class EntryLayout:
    """Where one entry's item values come from: its dataset keys per role, index selections, window offsets
    (frames, on its own fps grid) per dataset key, tolerance."""

    index: int  # position in the spec (an item's ``dataset_index``)
    slot: int  # position among the entries that take part (the sampler's entry)
    name: str
    group: str | None
    fps: int
    tolerance_s: float
    cameras: Mapping[str, str]  # role -> dataset key
    state_key: str | None
    state_indices: tuple[int, ...] | None
    state_dim: int
    action_key: str | None
    action_indices: tuple[int, ...] | None
    action_dim: int
    task_key: str | None  # "task": the episode's task text; else a text feature; None (``task: null``): ""
    offsets: Mapping[str, tuple[int, ...]]  # dataset key -> frame offsets (on the grid of `grid_fps`)
    target_fps: int | None = None  # the mixture's control rate: rows resampled to it (None: the entry's own fps)
    resample: Mapping[str, str] = field(default_factory=dict)  # dataset key -> resample rule (state, action)

    @property
    def grid_fps(self) -> int:
        """The frame rate of the entry's items: the mixture's control rate, else its own."""
        return self.fps if self.target_fps is None else self.target_fps

    def delta_timestamps(self) -> dict[str, list[float]]:
        """The windows as seconds on this entry's frame grid (what its single-dataset loader is given)."""
        return {
            k: frames_to_seconds(np.asarray(v, dtype=np.int64), self.grid_fps).tolist() for k, v in self.offsets.items()
        }

    @property
    def data_keys(self) -> list[str]:
        """The tabular columns its items need (nothing else is read)."""
        keys = list(BOOKKEEPING) + [k for k in (self.state_key, self.action_key) if k is not None]
        if self.task_key not in ("task", None):
            keys.append(self.task_key)
        return list(dict.fromkeys(keys))


@dataclass(frozen=True)
class MixtureLayout:
    """The keys and shapes every item of the mixture has (see the module docstring) and each entry's sources."""

    cameras: tuple[str, ...]  # camera roles, in order of first appearance
    image_size: tuple[int, int] | None  # (H, W); None without cameras
    resize_mode: str
    state_dim: int  # 0: no entry has a state
    action_dim: int
    windows: Mapping[str, int]  # role -> window length, for roles with a window
    entries: tuple[EntryLayout, ...]  # the entries that take part, in spec order
    depth_roles: tuple[str, ...] = ()  # camera roles that are depth cameras
    depth_unit: str = "mm"  # depth cameras' items in this unit

    @classmethod
    def from_report(
        cls,
        report: PreflightReport,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        depth_unit: str = "mm",
    ) -> MixtureLayout:
        """The layout of `report`'s entries that take part (status ``ok``). Raises `MixtureLayoutError` listing
        every problem: a role windowed differently in two entries, a role that is a depth camera in one entry and
        a colour camera in another, cameras of several sizes without `image_size`, a bad `image_size`,
        `resize_mode` or `depth_unit`."""
        problems: list[str] = []
        if resize_mode not in RESIZE_MODES:
            problems.append(f"resize_mode must be one of {RESIZE_MODES}, got {resize_mode!r}")
        try:
            check_unit(depth_unit)
        except ValueError as err:
            problems.append(str(err))
        spec = report.spec
        entries: list[EntryLayout] = []
        for rep in report.entries:
            if rep.status != "ok":
                continue
            e = spec.entries[rep.index]
            offsets = {}
            for role, off in rep.delta_offsets.items():
                key = rep.cameras.get(role) or {"state": rep.state_key, "action": rep.action_key}.get(role)
                if key is not None:
                    offsets[key] = tuple(off)
            entries.append(
                EntryLayout(
                    index=rep.index,
                    slot=len(entries),
                    name=rep.name,
                    group=rep.group,
                    fps=rep.fps,
                    tolerance_s=rep.tolerance_s,
                    cameras=dict(rep.cameras),
                    state_key=rep.state_key,
                    state_indices=e.state_indices if rep.state_key else None,
                    state_dim=rep.state_dim,
                    action_key=rep.action_key,
                    action_indices=e.action_indices if rep.action_key else None,
                    action_dim=rep.action_dim,
                    task_key=rep.task_key,
                    offsets=offsets,
                    target_fps=spec.target_fps,
                    resample={
                        key: rule
                        for role, rule in (spec.resample or {}).items()
                        for key in [rep.state_key if role == "state" else rep.action_key]
                        if key is not None
                    },
                )
            )
        if not entries:
            raise MixtureLayoutError(f"{spec.origin}: no entry takes part in the mixture", [])
        cameras = tuple(dict.fromkeys(r for e in entries for r in e.cameras))
        depth_roles = _depth_roles(report, entries, cameras, problems)
        windows = _windows(entries, cameras, problems)
        size = _image_size(report, entries, image_size, problems)
        if problems:
            raise MixtureLayoutError(
                f"{spec.origin}: the mixture's entries cannot share one item layout:\n  - " + "\n  - ".join(problems),
                problems,
            )
        return cls(
            cameras=cameras,
            image_size=size if cameras else None,
            resize_mode=resize_mode,
            state_dim=max(e.state_dim for e in entries),
            action_dim=max(e.action_dim for e in entries),
            windows=windows,
            entries=tuple(entries),
            depth_roles=depth_roles,
            depth_unit=depth_unit,
        )

    def restricted(self, indices: Sequence[int]) -> MixtureLayout:
        """The same keys, shapes and windows with only the entries of spec indices `indices`, re-numbered in order
        (one side of an eval split, where an entry may have no episode: its items keep the mixture's layout)."""
        keep = set(int(i) for i in indices)
        entries = [e for e in self.entries if e.index in keep]
        if len(entries) == len(self.entries):
            return self
        return replace(self, entries=tuple(replace(e, slot=i) for i, e in enumerate(entries)))

    # ------------------------------------------------------------------ keys
    @property
    def camera_keys(self) -> list[str]:
        return [camera_key(r) for r in self.cameras]

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    @property
    def groups(self) -> list[str | None]:
        return [e.group for e in self.entries]

    def role_key(self, entry: EntryLayout, role: str) -> str | None:
        """The entry's dataset key for a role (camera, ``state`` or ``action``), None when it has none."""
        if role == "state":
            return entry.state_key
        if role == "action":
            return entry.action_key
        return entry.cameras.get(role)


def _depth_roles(
    report: PreflightReport, entries: list[EntryLayout], cameras: tuple[str, ...], problems: list[str]
) -> tuple[str, ...]:
    """The camera roles that are depth cameras: in every entry that has the role, or in none."""
    out = []
    for role in cameras:
        kinds: dict[bool, list[str]] = {}
        for e in entries:
            if role in e.cameras:
                kinds.setdefault(role in report.entries[e.index].depth_roles, []).append(e.name)
        if len(kinds) > 1:
            problems.append(
                f"role {role!r} is a depth camera in {len(kinds[True])} entr"
                f"{'y' if len(kinds[True]) == 1 else 'ies'} ({', '.join(repr(x) for x in kinds[True][:3])}) "
                f"and a colour camera in {len(kinds[False])} ({', '.join(repr(x) for x in kinds[False][:3])}):"
                f" map them to different roles"
            )
        elif kinds.get(True):
            out.append(role)
    return tuple(out)


def _windows(entries: list[EntryLayout], cameras: tuple[str, ...], problems: list[str]) -> dict[str, int]:
    """Each role's window length: the same in every entry that has the role (None: no window)."""
    out = {}
    for role in (*cameras, "state", "action"):
        lengths: dict[int | None, list[str]] = {}
        for e in entries:
            key = {"state": e.state_key, "action": e.action_key}.get(role, e.cameras.get(role))
            if key is None:
                continue
            n = len(e.offsets[key]) if key in e.offsets else None
            lengths.setdefault(n, []).append(e.name)
        if len(lengths) > 1:
            parts = [
                f"{'no window' if n is None else f'{n} steps'} in {len(names)} entr{'y' if len(names) == 1 else 'ies'} "
                f"({', '.join(repr(x) for x in names[:3])}{' ...' if len(names) > 3 else ''})"
                for n, names in lengths.items()
            ]
            problems.append(
                f"role {role!r}: windows differ between entries: {'; '.join(parts)} (give every entry "
                "the same number of delta_timestamps for it)"
            )
        elif (first := next(iter(lengths), None)) is not None:
            out[role] = int(first)
    return out


def _image_size(report: PreflightReport, entries: list[EntryLayout], image_size, problems: list[str]):
    if image_size is not None:
        try:
            return check_image_size(image_size)
        except ValueError as e:
            problems.append(str(e))
            return None
    sizes: dict[tuple[int, int], list[str]] = {}
    for entry in entries:
        for role, shape in report.entries[entry.index].camera_shapes.items():
            sizes.setdefault((int(shape[0]), int(shape[1])), []).append(f"{entry.name}:{role}")
    if len(sizes) > 1:
        listed = ", ".join(f"{h}x{w} ({len(v)} cameras, e.g. {v[0]})" for (h, w), v in sorted(sizes.items())[:6])
        problems.append(
            f"cameras come in {len(sizes)} sizes (height x width: {listed}): give image_size=(H, W) to "
            "bring every frame to one size"
        )
        return None
    return next(iter(sizes)) if sizes else None
