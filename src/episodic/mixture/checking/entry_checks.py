"""Check one mixture entry against its dataset's metadata: every problem collected, none raised.

Checked: the episode selection (``episodes``/``exclude_episodes`` inside the dataset, something left to train on after
the spec's ``eval_split``: the sizes are the training side's, the held-out ones recorded apart), every role's key
(exists, is a camera for camera roles, a numeric vector for ``state``/``action``, text for ``task``), state/action index
selections inside the vector and the result within the mixture's ``max_state_dim``/``max_action_dim``,
``delta_timestamps`` converted with the entry's own fps, or the mixture's ``target_fps`` (rounded to the nearest frame,
the rounding recorded; with ``delta_rounding="exact"`` each must be on the grid within the entry's tolerance, LeRobot's
rule), camera frame rates against the dataset's, task labels present, statistics present for state and action. A key
that does not exist gets the closest existing keys (difflib) as suggestions. Pure: metadata in, facts and problems out;
numpy only.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

from ...format.features import NUMERIC_DTYPES
from ...format.metadata import DatasetMetadata
from ...format.timebase import frames_to_seconds, seconds_to_frames
from ...order.eval_split import split_episodes
from ...tabular.resample import episode_lengths
from ...tabular.windows import delta_offsets
from .report import EntryReport, Problem
from .spec import RESERVED_ROLES, MixtureEntry, MixtureSpec

__all__ = ["check_entry", "default_camera_roles", "entry_sides", "listed_episodes", "selected_episodes"]

TEXT = ("string", "str", "large_string")


def default_camera_roles(camera_keys: Sequence[str], style: str) -> dict[str, str]:
    """Roles for an entry that names none: ``camera0..N`` in info order (``slots``), else each key's last dotted
    part (``observation.images.top`` -> ``top``; the whole key with '.' -> '_' when two keys share it)."""
    if style == "slots":
        return {f"camera{i}": k for i, k in enumerate(camera_keys)}
    short = [k.rsplit(".", 1)[-1] for k in camera_keys]
    out = {}
    for key, s in zip(camera_keys, short):
        role = s if short.count(s) == 1 and s not in RESERVED_ROLES else key.replace(".", "_").replace("-", "_")
        out[role] = key
    return out


def listed_episodes(entry: MixtureEntry, total: int) -> np.ndarray:
    """The entry's episodes in the order its ``episodes`` lists them (repeats dropped; default all, ascending),
    minus ``exclude_episodes``, those outside ``0..total-1`` left out (preflight reports them)."""
    listed = np.arange(total, dtype=np.int64)
    if entry.episodes is not None:
        req = np.asarray(entry.episodes, dtype=np.int64).reshape(-1)
        req = req[(req >= 0) & (req < total)]
        _, first = np.unique(req, return_index=True)
        listed = req[np.sort(first)]
    if entry.exclude_episodes:
        listed = listed[~np.isin(listed, np.asarray(entry.exclude_episodes, dtype=np.int64))]
    return listed


def selected_episodes(entry: MixtureEntry, total: int) -> np.ndarray:
    """The entry's episodes (ascending): ``episodes`` (default all) minus ``exclude_episodes``, those outside
    ``0..total-1`` left out (preflight reports them). Both sides of an eval split (`entry_sides` splits them)."""
    return np.sort(listed_episodes(entry, total))


def entry_sides(spec: MixtureSpec, entry: MixtureEntry, meta: DatasetMetadata) -> tuple[np.ndarray, np.ndarray]:
    """(train, held out) episodes of the entry, each ascending, under the spec's ``eval_split``
    (`order.eval_split.split_episodes` on its listed episodes and their first tasks); without one, (selected,
    none)."""
    listed = listed_episodes(entry, len(meta.episodes))
    if spec.eval_split is None:
        return np.sort(listed), np.zeros(0, np.int64)
    return split_episodes(spec.eval_split, listed, meta.episodes.first_tasks(listed))


def _closest(key: str, candidates: Sequence[str]) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(key, list(candidates), n=3, cutoff=0.5))


def check_entry(
    spec: MixtureSpec, index: int, entry: MixtureEntry, meta: DatasetMetadata
) -> tuple[EntryReport, list[Problem]]:
    """The facts of entry `index` (`entry`, named) and its problems, from its dataset's metadata `meta`."""
    name = entry.name or entry.source
    problems: list[Problem] = []

    def add(fieldname: str, message: str, severity: str = "error", suggestions: tuple[str, ...] = ()) -> None:
        problems.append(Problem(index, name, fieldname, message, severity, suggestions))

    info = meta.info
    features = info.features
    total = len(meta.episodes)
    # ---- episode selection
    for fieldname in ("episodes", "exclude_episodes"):
        req = np.asarray(getattr(entry, fieldname) or (), dtype=np.int64)
        bad = req[(req < 0) | (req >= total)]
        if bad.size:
            add(
                fieldname,
                f"{bad.size} episode(s) out of range {bad.tolist()[:10]}: the dataset has {total} "
                f"episodes (0..{total - 1})",
            )
    selected, held = entry_sides(spec, entry, meta)
    all_lengths = episode_lengths(meta, spec.target_fps)  # at the mixture's control rate, when it has one
    frames = int(all_lengths[selected].sum())
    if selected.size == 0 and held.size and spec.eval_split is not None:
        add(
            "eval_split",
            f"the eval split {spec.eval_split.to_dict()} holds out all {held.size} selected episode(s): "
            f"none is left to train on",
        )
    elif selected.size == 0:
        add("episodes", "no episode selected")
    elif frames == 0:
        add("episodes", "the selected episodes have no frames")

    # ---- roles
    explicit = spec.entry_roles(entry)
    removed = spec.entry_removed_roles(entry)
    camera_roles = {r: k for r, k in explicit.items() if r not in RESERVED_ROLES}
    if not camera_roles and not removed.difference(RESERVED_ROLES):  # names no camera role: all, by default
        camera_roles = default_camera_roles(info.camera_keys, spec.camera_role_style)
    cameras, shapes, depth_roles = {}, {}, []
    for role, camera in camera_roles.items():
        f = features.get(camera)
        if f is None:
            add(
                f"roles.{role}",
                f"no feature {camera!r} in this dataset (cameras: {info.camera_keys})",
                suggestions=_closest(camera, info.camera_keys) or _closest(camera, list(features)),
            )
            continue
        if not f.is_camera:
            add(
                f"roles.{role}",
                f"feature {camera!r} is {f.dtype}, not a camera (cameras: {info.camera_keys})",
                suggestions=_closest(camera, info.camera_keys),
            )
            continue
        h, w, c = info.camera_hw(camera)
        problem = f.camera_problem(c)
        if problem:
            add(f"roles.{role}", problem)
        elif f.is_depth:
            depth_roles.append(role)
        vfps = f.info.get("video.fps") if isinstance(f.info, dict) else None
        if isinstance(vfps, (int, float)) and not isinstance(vfps, bool) and abs(vfps - info.fps) > 1e-6:
            add(
                f"roles.{role}", f"camera {camera!r} is encoded at {vfps} fps, the dataset at {info.fps} fps", "warning"
            )
        cameras[role], shapes[role] = camera, (int(h), int(w), int(c))
    repeated = sorted({k for k in cameras.values() if list(cameras.values()).count(k) > 1})
    if repeated:
        add("roles", f"camera key(s) {repeated} mapped to more than one role", "warning")

    dims: dict[str, int] = {}
    keys: dict[str, str | None] = {}
    for role, default, indices, limit in (
        ("state", "observation.state", entry.state_indices, spec.max_state_dim),
        ("action", "action", entry.action_indices, spec.max_action_dim),
    ):
        key = explicit.get(role)
        if key is None:
            keys[role], dims[role] = None, 0
            if role in removed:  # `null`: no role, not even the default
                if indices is not None:
                    add(f"{role}_indices", f"no {role} role: the entry's roles remove it ({role}: null)")
                continue
            if default in features:
                key = default
            else:
                if indices is not None:
                    add(f"{role}_indices", f"no {role} role: the dataset has no {default!r} and the entry maps none")
                continue
        f = features.get(key)
        if f is None:
            add(
                f"roles.{role}",
                f"no feature {key!r} in this dataset",
                suggestions=_closest(key, [k for k, v in features.items() if not v.is_camera]),
            )
            continue
        if f.dtype not in NUMERIC_DTYPES or len(f.shape) != 1:
            add(f"roles.{role}", f"feature {key!r} must be a 1-d numeric vector, is {f.dtype} {list(f.shape)}")
            continue
        dim = int(f.shape[0])
        if indices is not None:
            outside = [i for i in indices if i >= dim]
            if outside:
                add(
                    f"{role}_indices",
                    f"indices {outside[:10]} out of range: {key!r} has {dim} dimensions (0..{dim - 1})",
                )
            dim = len(indices)
        if limit is not None and dim > limit:
            add(f"roles.{role}", f"{key!r} has {dim} dimensions, more than max_{role}_dim={limit}")
        keys[role], dims[role] = key, dim
        if key not in meta.stats:
            add(
                f"roles.{role}",
                f"no statistics for {key!r} in the dataset's stats (normalising it needs them)",
                "warning",
            )

    for role, rule in (spec.resample or {}).items():
        key = keys.get(role)
        if rule == "linear" and key is not None and not features[key].dtype.startswith("float"):
            add(
                f"resample.{role}",
                f"{key!r} is {features[key].dtype}: 'linear' needs a float vector (use 'nearest' or 'previous')",
            )

    task_key = None if "task" in removed else explicit.get("task", "task")
    if task_key is None:
        pass  # `task: null`: every item's task text is ""
    elif task_key == "task":
        tasks = meta.episodes.tasks
        known = set(meta.tasks)
        both = np.sort(np.concatenate([selected, held])).tolist()
        missing = [int(e) for e in both if not any(t in known for t in (tasks[e] or []))]
        if missing:
            add(
                "roles.task",
                f"{len(missing)} selected episode(s) have no task text in the tasks table (first: "
                f"{missing[:5]}); their items get ''",
                "warning",
            )
    elif task_key in features:
        if features[task_key].dtype not in TEXT:
            add("roles.task", f"feature {task_key!r} is {features[task_key].dtype}, not text")
    else:
        add(
            "roles.task",
            f"no feature {task_key!r} in this dataset (use 'task' for the episodes' task text)",
            suggestions=_closest(task_key, ["task", *features]),
        )

    # ---- windows, on this entry's own fps grid (the mixture's control rate, when it has one)
    grid = spec.target_fps if spec.target_fps is not None else info.fps
    tol = spec.entry_tolerance_s(entry)
    role_keys = {**cameras, **{r: k for r, k in keys.items() if k is not None}}
    offsets: dict[str, tuple[int, ...]] = {}
    rounding = 0.0
    for role, seconds in spec.entry_delta_timestamps(entry).items():
        if role not in role_keys:
            continue  # a role this entry does not have: checked mixture-wide
        if spec.delta_rounding == "exact":
            try:
                got = delta_offsets({role: list(seconds)}, grid, tol)[role]
            except ValueError as e:
                add(f"delta_timestamps.{role}", str(e).replace(f"delta_timestamps[{role!r}]: ", ""))
                continue
        else:
            s = np.asarray(seconds, dtype=np.float64)
            got = seconds_to_frames(s, grid)
            rounding = max(rounding, float(np.abs(s - frames_to_seconds(got, grid)).max()))
        offsets[role] = tuple(int(x) for x in got)

    report = EntryReport(
        index=index,
        name=name,
        source=entry.source,
        version=info.codebase_version,
        fps=int(info.fps),
        robot_type=info.robot_type,
        group=entry.group if entry.group is not None else info.robot_type,
        total_episodes=total,
        episodes=int(selected.size),
        frames=frames,
        eval_episodes=int(held.size),
        eval_frames=int(all_lengths[held].sum()),
        cameras=cameras,
        camera_shapes=shapes,
        depth_roles=tuple(depth_roles),
        state_key=keys.get("state"),
        state_dim=dims.get("state", 0),
        action_key=keys.get("action"),
        action_dim=dims.get("action", 0),
        task_key=task_key,
        delta_offsets=offsets,
        tolerance_s=float(tol),
        delta_rounding_s=rounding,
    )
    return report, problems
