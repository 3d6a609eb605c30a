"""Which episodes go into which file of a re-laid-out dataset (`episodic convert` / `repack`): a pure function of
the source's metadata, its data files' sizes and schemas, its video units (`video_units`) and the options, so a
run that was stopped computes the same plan again and keeps the files it had finished.

- Data files: episodes in index order, rotated into a new file when the open one reaches `data_file_mb` (as the
  writer does: `writer.groups.Series`) or when the rows' schema changes (a file has one schema); inside a file,
  one row group per episode (LeRobot's layout; ``row_group_mb=None``), or whole episodes packed into row groups
  of up to `row_group_mb` (an episode larger than that split into pieces of about it). Readers read the row
  groups holding the episodes they need (`tabular.columns`): one per episode fetches the fewest bytes.
- Video files, per camera: units in the order of their first episode, rotated at `video_file_mb` or when the
  stream's settings change (packets of other settings cannot share a file); each unit's packets are shifted to
  follow the previous unit's (`video_units.place_units`).
- `chunks_size` files per chunk directory, for both.

The plan is JSON (`Plan.to_json`) and has a digest: the resume check of tools/fleet/relayout.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ...checks import check_number
from ...format.info import DEFAULT_CHUNKS_SIZE, DEFAULT_DATA_FILE_MB, DEFAULT_VIDEO_FILE_MB
from ...format.metadata import DatasetMetadata
from ...writer.groups import Group, Series
from .video_units import Unit, place_units

__all__ = ["VERIFY", "DataFileFacts", "Plan", "RelayoutOptions", "plan_layout"]

MB = 1024 * 1024
VERIFY = ("none", "structure", "frames")
PLAN_FORMAT = 1


@dataclass(frozen=True)
class RelayoutOptions:
    """How the new dataset is laid out. `row_group_mb` None: one row group per episode. `verify`: what is
    checked before the dataset counts as done: ``structure`` (`episodic validate` without decoding: every data
    file read against the metadata, every mp4's frame index against its episodes), ``frames`` (also each
    episode's first and last frame decoded), ``none``."""

    data_file_mb: float = DEFAULT_DATA_FILE_MB
    video_file_mb: float = DEFAULT_VIDEO_FILE_MB
    chunks_size: int = DEFAULT_CHUNKS_SIZE
    row_group_mb: float | None = None
    verify: str = "structure"

    def __post_init__(self) -> None:
        check_number("data_file_mb", self.data_file_mb, 0, 1 << 20, lo_open=True)
        check_number("video_file_mb", self.video_file_mb, 0, 1 << 20, lo_open=True)
        check_number("chunks_size", self.chunks_size, 1, 1 << 30, integer=True)
        if self.row_group_mb is not None:
            check_number("row_group_mb", self.row_group_mb, 0, 1 << 20, lo_open=True)
        if self.verify not in VERIFY:
            raise ValueError(f"verify must be one of {', '.join(VERIFY)}, got {self.verify!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RelayoutOptions:
        if not isinstance(raw, dict):
            raise ValueError(f"relayout options must be an object, got {raw!r}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown relayout option(s) {unknown} (known: {sorted(known)})")
        return cls(**raw)


@dataclass(frozen=True)
class DataFileFacts:
    """A source data file: its rows, its bytes (compressed column chunks) and its schema (`schema` text without
    the file's metadata: files of equal schema can be joined)."""

    rows: int
    bytes: int
    schema: str


@dataclass
class Plan:
    data: list[dict[str, Any]] = field(default_factory=list)  # {"rel", "chunk", "file", "row_groups": [[[e, lo, hi]]]}
    videos: list[dict[str, Any]] = field(default_factory=list)  # {"camera", "rel", "runs": [{src,start,stop,shift}]}
    episode_data: list[list[int]] = field(default_factory=list)  # per episode: [chunk, file]
    episode_videos: dict[str, list[list]] = field(default_factory=dict)  # camera -> per episode [chunk, file, from, to]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "data": self.data,
            "videos": self.videos,
            "episode_data": self.episode_data,
            "episode_videos": self.episode_videos,
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    @property
    def files(self) -> list[str]:
        """Every file the plan writes (data, then videos)."""
        return [d["rel"] for d in self.data] + [v["rel"] for v in self.videos]


def _groups(series_adds, series: Series) -> list[tuple[Group, list]]:
    """Run `series_adds(series, record)`; the groups made, in order, each with what was recorded in it."""
    made: dict[tuple[int, int], tuple[Group, list]] = {}

    def record(item) -> None:
        g = series.open
        made.setdefault((g.chunk, g.file), (g, []))[1].append(item)

    series_adds(series, record)
    return list(made.values())


def _row_groups(
    members: list[int], lengths: np.ndarray, per_ep: np.ndarray, row_group_mb: float | None
) -> list[list[list[int]]]:
    """A data file's row groups, each a list of [episode, first row, end row] pieces: one per episode (None), or
    whole episodes packed up to `row_group_mb` and an episode larger than that split into pieces of about it."""
    if row_group_mb is None:
        return [[[e, 0, int(lengths[e])]] for e in members]
    target = row_group_mb * MB
    groups: list[list[list[int]]] = [[]]
    size = 0.0
    for e in members:
        n = int(lengths[e])
        if per_ep[e] > target and n > 1:  # alone, in pieces of about the target
            pieces = min(n, int(np.ceil(per_ep[e] / target)))
            cuts = np.linspace(0, n, pieces + 1).round().astype(int)
            groups += [[[e, int(a), int(b)]] for a, b in zip(cuts, cuts[1:])]
            groups.append([])
            size = 0.0
            continue
        if groups[-1] and size + per_ep[e] > target:
            groups.append([])
            size = 0.0
        groups[-1].append([e, 0, n])
        size += per_ep[e]
    return [grp for grp in groups if grp]


def plan_layout(
    meta: DatasetMetadata, data_facts: list[DataFileFacts], units: dict[str, list[Unit]], options: RelayoutOptions
) -> Plan:
    """The plan (module docstring). `data_facts[i]` describes ``meta.episodes.data_files[i]``; `units[camera]`
    covers every episode of the camera once."""
    eps = meta.episodes
    n = len(eps)
    lengths = eps.length
    plan = Plan(episode_data=[[0, 0] for _ in range(n)])

    # ----------------------------------------------------------------------------------------------- data
    per_ep = np.zeros(n)
    schema_of: list[str] = []
    for e in range(n):
        facts = data_facts[int(eps.data_file_id[e])]
        per_ep[e] = facts.bytes * (lengths[e] / facts.rows) if facts.rows else 0.0
        schema_of.append(facts.schema)

    def add_data(series: Series, record) -> None:
        current = None
        for e in range(n):
            if series.open.episodes and schema_of[e] != current:
                series.close_open()  # one schema per file
            current = schema_of[e]
            record(e)
            series.add(e, int(lengths[e]), int(per_ep[e]))

    for g, members in _groups(add_data, Series(None, options.data_file_mb * MB, options.chunks_size)):
        for e in members:
            plan.episode_data[e] = [g.chunk, g.file]
        plan.data.append(
            {
                "rel": g.rel,
                "chunk": g.chunk,
                "file": g.file,
                "row_groups": _row_groups(members, lengths, per_ep, options.row_group_mb),
            }
        )

    # ---------------------------------------------------------------------------------------------- videos
    for camera in meta.video_keys:
        cam_units = sorted(units[camera], key=lambda u: min(u.episodes))
        per_episode: list[list] = [[] for _ in range(n)]

        def add_units(series: Series, record, cam_units=cam_units) -> None:
            current = None
            for u in cam_units:
                if series.open.episodes and u.params != current:
                    series.close_open()  # packets of other settings cannot share a file
                current = u.params
                record(u)
                for e in u.episodes[:-1]:
                    series.add(e, int(lengths[e]), 0)
                series.add(u.episodes[-1], int(lengths[u.episodes[-1]]), u.bytes)  # closes after the whole unit

        for g, members in _groups(add_units, Series(camera, options.video_file_mb * MB, options.chunks_size)):
            shifts, times = place_units(members)
            plan.videos.append(
                {
                    "camera": camera,
                    "rel": g.rel,
                    "chunk": g.chunk,
                    "file": g.file,
                    "runs": [
                        {"src": u.source, "start": u.start, "stop": u.stop, "shift": s} for u, s in zip(members, shifts)
                    ],
                }
            )
            for e, (lo, hi) in times.items():
                per_episode[e] = [g.chunk, g.file, lo, hi]
        missing = [e for e in range(n) if not per_episode[e]]
        if missing:
            raise ValueError(f"camera {camera!r}: episodes {missing[:10]} are in no video unit")
        plan.episode_videos[camera] = per_episode
    return plan
