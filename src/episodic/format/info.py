"""meta/info.json: parsed and checked, with clear errors naming the file and the field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import DatasetFormatError, ProblemList, UnsafePathError
from .features import DEFAULT_FEATURES, Feature
from .paths import DATA_FIELDS, V21_DATA_FIELDS, V21_VIDEO_FIELDS, VIDEO_FIELDS, render, template_problems

V30 = "v3.0"
V21 = "v2.1"
SUPPORTED_VERSIONS = (V30, "v2.0", V21)

DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILE_MB = 100
DEFAULT_VIDEO_FILE_MB = 200


def _field(
    raw: dict,
    name: str,
    types: type | tuple[type, ...],
    source: str,
    problems: ProblemList,
    default: Any = ...,
    allow_none=False,
):
    """raw[name] checked against `types`; a problem (and `default`, or None) when missing or mistyped."""
    if name not in raw:
        if default is ...:
            problems.add(f"{source}: missing required field {name!r}")
            return None
        return default
    value = raw[name]
    if value is None and allow_none:
        return None
    # bool is an int in Python; never accept it where a number is wanted
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        want = " or ".join(t.__name__ for t in _as_tuple(types))
        problems.add(f"{source}: field {name!r} must be {want}, got {value!r}")
        return None if default is ... else default
    return value


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)


@dataclass
class DatasetInfo:
    codebase_version: str
    fps: int
    features: dict[str, Feature]
    total_episodes: int
    total_frames: int
    total_tasks: int
    chunks_size: int = DEFAULT_CHUNKS_SIZE
    data_files_size_in_mb: float = DEFAULT_DATA_FILE_MB
    video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_MB
    data_path: str = DEFAULT_DATA_PATH
    video_path: str | None = DEFAULT_VIDEO_PATH
    robot_type: str | None = None
    splits: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept for round trips

    # ------------------------------------------------------------------ views
    @property
    def is_v21(self) -> bool:
        return self.codebase_version != V30

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.is_video]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.is_image]

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.is_camera]

    @property
    def depth_keys(self) -> list[str]:
        """Cameras that are depth maps (`format.depth`), among `camera_keys`."""
        return [k for k, f in self.features.items() if f.is_camera and f.is_depth]

    @property
    def tabular_keys(self) -> list[str]:
        """Columns stored in the data parquet files (everything but videos)."""
        return [k for k, f in self.features.items() if not f.is_video]

    # ------------------------------------------------------------------ io
    @classmethod
    def from_dict(cls, raw: Any, source: str = "meta/info.json") -> DatasetInfo:
        """The info of a parsed info.json. Every problem of the file is found before raising: the
        DatasetFormatError lists them all (`problems`), each naming the file and the field."""
        if not isinstance(raw, dict):
            raise DatasetFormatError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        problems = ProblemList(strict=False)
        version = _field(raw, "codebase_version", str, source, problems)
        if version is not None and version not in SUPPORTED_VERSIONS:
            problems.add(
                f"{source}: codebase_version {version!r} is not supported (supported: {', '.join(SUPPORTED_VERSIONS)})"
            )
        fps = _field(raw, "fps", (int, float), source, problems)
        if fps is not None and not (fps > 0 and fps < float("inf") and int(fps) == fps):
            problems.add(f"{source}: field 'fps' must be a positive integer, got {fps!r}")
            fps = None
        feats_raw = _field(raw, "features", dict, source, problems) or {}
        features: dict[str, Feature] = {}
        for name, spec in feats_raw.items():
            try:
                features[name] = Feature.from_json(name, spec, source)
            except DatasetFormatError as e:
                problems.items.extend(e.problems)
        for name, spec in DEFAULT_FEATURES.items():
            if name not in feats_raw:
                features[name] = Feature.from_json(name, spec, source)
        for name, spec in DEFAULT_FEATURES.items():  # the reader relies on their kind: integers, float times
            f = features.get(name)
            kinds = "f" if spec["dtype"].startswith("float") else "iu"
            if f is not None and (
                f.shape != (1,) or f.is_camera or f.dtype == "string" or np.dtype(f.dtype).kind not in kinds
            ):
                problems.add(
                    f"{source}: feature {name!r} must be {'a float' if kinds == 'f' else 'an integer'} of "
                    f"shape [1], got {f.dtype} {list(f.shape)}"
                )
        known = {f.name for f in cls.__dataclass_fields__.values()}
        has_video = any(f.is_video for f in features.values()) or any(
            isinstance(s, dict) and s.get("dtype") == "video" for s in feats_raw.values()
        )
        values = dict(
            total_episodes=_field(raw, "total_episodes", int, source, problems),
            total_frames=_field(raw, "total_frames", int, source, problems),
            total_tasks=_field(raw, "total_tasks", int, source, problems, default=0),
            chunks_size=_field(raw, "chunks_size", int, source, problems, default=DEFAULT_CHUNKS_SIZE),
            data_files_size_in_mb=_field(
                raw, "data_files_size_in_mb", (int, float), source, problems, default=DEFAULT_DATA_FILE_MB
            ),
            video_files_size_in_mb=_field(
                raw, "video_files_size_in_mb", (int, float), source, problems, default=DEFAULT_VIDEO_FILE_MB
            ),
            data_path=_field(raw, "data_path", str, source, problems, default=DEFAULT_DATA_PATH),
            video_path=_field(
                raw,
                "video_path",
                str,
                source,
                problems,
                default=DEFAULT_VIDEO_PATH if has_video else None,
                allow_none=True,
            ),
            robot_type=_field(raw, "robot_type", str, source, problems, default=None, allow_none=True),
            splits=_field(raw, "splits", dict, source, problems, default={}),
        )
        for name in ("total_episodes", "total_frames", "total_tasks", "chunks_size"):
            v = values[name]
            if v is not None and (v < 0 or (name == "chunks_size" and v == 0)):
                problems.add(f"{source}: field {name!r} has an invalid value {v!r}")
        v21 = version is not None and version != V30
        unsafe = False  # a template that leaves the root: the error is an UnsafePathError
        for name, standard in (("data_path", DATA_FIELDS), ("video_path", VIDEO_FIELDS)):
            template = values[name]
            if template is None:
                continue
            fields: tuple[str, ...] = standard
            if v21:  # per-episode files; the reader falls back to the standard template when this one is v3.0's
                fields = tuple(dict.fromkeys(fields + (V21_VIDEO_FIELDS if name == "video_path" else V21_DATA_FIELDS)))
            for problem, kind in template_problems(template, fields):
                problems.add(f"{source}: field {name!r} ({template!r}) {problem}")
                unsafe = unsafe or kind is UnsafePathError
        video_keys = [k for k, f in features.items() if f.is_video]
        if video_keys and not values["video_path"]:
            problems.add(f"{source}: features {video_keys} are videos but 'video_path' is empty")
        if problems:
            items = problems.items
            message = items[0] if len(items) == 1 else f"{len(items)} problems: " + "; ".join(items)
            raise (UnsafePathError if unsafe else DatasetFormatError)(message, problems=items)
        return cls(
            codebase_version=version,
            fps=int(fps),
            features=features,
            extra={k: v for k, v in raw.items() if k not in known},
            **values,
        )

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "meta/info.json") -> DatasetInfo:
        try:
            raw = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DatasetFormatError(f"{source}: not valid JSON ({e})") from None
        return cls.from_dict(raw, source)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "codebase_version": self.codebase_version,
            "robot_type": self.robot_type,
            "total_episodes": self.total_episodes,
            "total_frames": self.total_frames,
            "total_tasks": self.total_tasks,
            "chunks_size": self.chunks_size,
            "data_files_size_in_mb": self.data_files_size_in_mb,
            "video_files_size_in_mb": self.video_files_size_in_mb,
            "fps": self.fps,
            "splits": self.splits,
            "data_path": self.data_path,
            "video_path": self.video_path,
            "features": {k: f.to_json() for k, f in self.features.items()},
        }
        out.update(self.extra)
        return out

    # ------------------------------------------------------------------ paths
    def data_file(self, chunk_index: int, file_index: int, where: str = "meta/info.json") -> str:
        """The data file of (chunk, file), from the `data_path` template, checked (format.paths.render)."""
        return render(self.data_path, f"{where}: field 'data_path'", chunk_index=chunk_index, file_index=file_index)

    def video_file(self, video_key: str, chunk_index: int, file_index: int, where: str = "meta/info.json") -> str:
        """The mp4 of camera `video_key` and (chunk, file), from the `video_path` template, checked."""
        if self.video_path is None:
            raise DatasetFormatError(f"{where}: field 'video_path' is empty but {video_key!r} is a video")
        return render(
            self.video_path,
            f"{where}: field 'video_path'",
            video_key=video_key,
            chunk_index=chunk_index,
            file_index=file_index,
        )

    def camera_hw(self, key: str) -> tuple[int, int, int]:
        """(height, width, channels) of a camera, from its names when they say the order."""
        f = self.features[key]
        names = f.names if isinstance(f.names, list) else None
        if names and len(names) == 3 and names[0] in ("channels", "channel", "c"):
            c, h, w = f.shape
            return h, w, c
        h, w, c = f.shape
        return h, w, c
