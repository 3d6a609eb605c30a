"""OpenTau's dataset-mixture config as a `MixtureSpec`, read as it is.

OpenTau (``opentau.configs.default.DatasetMixtureConfig``) writes ``{"datasets": [DatasetConfig, ...],
"weights": [...] | null, "action_freq": ..., ...}``, alone or as the ``dataset_mixture`` of a training config,
often split over files with ``{"$ref": ...}`` (resolved by `mixture.refs`). Each dataset: ``repo_id``,
``root`` (the local copy: read when it has ``meta/info.json``, else the Hub's files go there; a URL --
``http(s)://``, ``s3://``, ``hf://`` ... -- is where the dataset is read from, as `LeRobotDataset`'s ``root``: the
entry's source is that URL, named after its ``repo_id``, and nothing is downloaded from the Hub), ``revision``,
``episodes`` and ``data_features_name_mapping``, which maps OpenTau's
standard names to the dataset's keys: ``camera0..N`` (camera roles, kept under those names), ``state``,
``actions`` (our ``action``), ``prompt`` (our ``task``); ``response`` has no counterpart here and is dropped.
``weights`` become explicit weights; without them the mixture is proportional to frames (OpenTau infers them
from dataset lengths). A dataset without a mapping gets its cameras as ``camera0..N`` in info.json order.
Fields that shape training rather than the mixture (``action_freq``, resampling, image transforms, stats,
validation split, history) are accepted and listed in `MixtureSpec.ignored`. ``vqa`` datasets are not robot
datasets and are reported as problems.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ...storage.source import is_url
from .spec import MixtureEntry, MixtureSpec, Weighting
from .spec_checks import checked_spec, raise_problems

__all__ = ["from_opentau"]

_DATASET_FIELDS = (
    "repo_id",
    "vqa",
    "root",
    "episodes",
    "image_transforms",
    "revision",
    "use_imagenet_stats",
    "video_backend",
    "stats",
    "data_features_name_mapping",
    "val_split_ratio",
)
_DATASET_IGNORED = ("image_transforms", "use_imagenet_stats", "video_backend", "stats", "val_split_ratio")
_MIXTURE_FIELDS = (
    "datasets",
    "weights",
    "action_freq",
    "image_resample_strategy",
    "vector_resample_strategy",
    "val_split_ratio",
    "n_obs_history",
    "history_interval",
)
_ROLE_NAMES = {"state": "state", "actions": "action", "prompt": "task"}
_DROPPED_ROLES = ("response",)


def _roles(mapping: Any, where: str, problems: list[str], dropped: set[str]) -> dict[str, str] | None:
    if mapping is None:
        return None
    if not isinstance(mapping, Mapping):
        problems.append(f"{where}: field 'data_features_name_mapping' must be an object, got {mapping!r}")
        return None
    roles: dict[str, str] = {}
    for std, key in mapping.items():
        if std in _DROPPED_ROLES:
            dropped.add(std)
        elif std in _ROLE_NAMES:
            roles[_ROLE_NAMES[std]] = key
        elif isinstance(std, str) and std.startswith("camera") and std[6:].isdigit():
            roles[std] = key
        else:
            close = difflib.get_close_matches(str(std), ["camera0", *_ROLE_NAMES, *_DROPPED_ROLES], n=2, cutoff=0.5)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            problems.append(
                f"{where}: data_features_name_mapping: {std!r} is not one of OpenTau's standard names "
                f"(camera0..N, state, actions, prompt, response){hint}"
            )
    return roles


def from_opentau(raw: Mapping, origin: str = "<dict>") -> MixtureSpec:
    """The `MixtureSpec` of an OpenTau mixture config (or of a training config holding one)."""
    problems: list[str] = []
    ignored: list[str] = []
    if "dataset_mixture" in raw:
        ignored += [f"training config field {k!r}" for k in raw if k != "dataset_mixture"]
        origin = f"{origin}: dataset_mixture"
        raw = raw["dataset_mixture"]
        if not isinstance(raw, Mapping):
            raise_problems([f"{origin}: must be an object with 'datasets', got {type(raw).__name__}"], origin)
    for k in raw:
        if k not in _MIXTURE_FIELDS:
            close = difflib.get_close_matches(str(k), _MIXTURE_FIELDS, n=2, cutoff=0.5)
            problems.append(
                f"{origin}: unknown field {k!r}" + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")
            )
        elif k not in ("datasets", "weights"):
            ignored.append(f"mixture field {k!r}")
    datasets = raw.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        problems.append(f"{origin}: field 'datasets' must be a non-empty list, got {datasets!r}")
        datasets = []
    weights = raw.get("weights")
    if weights is not None and (not isinstance(weights, list) or len(weights) != len(datasets)):
        problems.append(
            f"{origin}: field 'weights' must be a list with one weight per dataset ({len(datasets)}), got {weights!r}"
        )
        weights = None
    dropped: set[str] = set()
    entries = []
    repos = [d.get("repo_id") for d in datasets if isinstance(d, Mapping)]
    for i, d in enumerate(datasets):
        where = f"{origin}: datasets[{i}]"
        if not isinstance(d, Mapping):
            problems.append(f"{where}: must be an object, got {type(d).__name__}")
            continue
        repo = d.get("repo_id")
        where += f" ({repo})" if isinstance(repo, str) else ""
        for k in d:
            if k not in _DATASET_FIELDS:
                close = difflib.get_close_matches(str(k), _DATASET_FIELDS, n=2, cutoff=0.5)
                problems.append(
                    f"{where}: unknown field {k!r}"
                    + (f" (did you mean {', '.join(map(repr, close))}?)" if close else "")
                )
            elif k in _DATASET_IGNORED:
                ignored.append(f"datasets[{i}].{k}")
        if d.get("vqa") is not None:
            problems.append(
                f"{where}: 'vqa' datasets are not LeRobot datasets and cannot be part of an episodic mixture"
            )
            continue
        if not isinstance(repo, str) or not repo:
            problems.append(f"{where}: field 'repo_id' must be a non-empty string, got {repo!r}")
            continue
        root = d.get("root")
        episodes = d.get("episodes")
        remote = root if isinstance(root, str) and is_url(root) else None  # the dataset is there: read it from there
        entries.append(
            MixtureEntry(
                source=remote if remote is not None else repo,
                name=repo if remote is not None and repos.count(repo) == 1 else None,
                root=None if remote is not None else root,
                revision=d.get("revision"),
                episodes=tuple(episodes) if isinstance(episodes, list) else episodes,
                weight=weights[i] if weights is not None else None,
                roles=_roles(d.get("data_features_name_mapping"), where, problems, dropped),
            )
        )
    ignored += [f"mapping role {r!r} (no counterpart)" for r in sorted(dropped)]
    spec = MixtureSpec(
        entries=tuple(entries),
        weighting=Weighting(rule="explicit" if weights is not None else "frames"),
        camera_role_style="slots",
        origin=origin,
        ignored=tuple(ignored),
    )
    spec = checked_spec(spec, problems)
    raise_problems(problems, origin)
    return spec
