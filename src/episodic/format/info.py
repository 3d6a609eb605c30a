"""meta/info.json: parsed and checked, with clear errors naming the file and the field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .errors import DatasetFormatError
from .features import DEFAULT_FEATURES, Feature

V30 = "v3.0"
V21 = "v2.1"
SUPPORTED_VERSIONS = (V30, "v2.0", V21)

DEFAULT_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILE_MB = 100
DEFAULT_VIDEO_FILE_MB = 200


def _field(raw: dict, name: str, types: type | tuple[type, ...], source: str, default: Any = ..., allow_none=False):
    if name not in raw:
        if default is ...:
            raise DatasetFormatError(f"{source}: missing required field {name!r}")
        return default
    value = raw[name]
    if value is None and allow_none:
        return None
    # bool is an int in Python; never accept it where a number is wanted
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        want = " or ".join(t.__name__ for t in _as_tuple(types))
        raise DatasetFormatError(f"{source}: field {name!r} must be {want}, got {value!r}")
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
    def tabular_keys(self) -> list[str]:
        """Columns stored in the data parquet files (everything but videos)."""
        return [k for k, f in self.features.items() if not f.is_video]

    # ------------------------------------------------------------------ io
    @classmethod
    def from_dict(cls, raw: Any, source: str = "meta/info.json") -> "DatasetInfo":
        if not isinstance(raw, dict):
            raise DatasetFormatError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        version = _field(raw, "codebase_version", str, source)
        if version not in SUPPORTED_VERSIONS:
            raise DatasetFormatError(
                f"{source}: codebase_version {version!r} is not supported (supported: {', '.join(SUPPORTED_VERSIONS)})"
            )
        fps = _field(raw, "fps", (int, float), source)
        if fps <= 0 or int(fps) != fps:
            raise DatasetFormatError(f"{source}: field 'fps' must be a positive integer, got {fps!r}")
        feats_raw = _field(raw, "features", dict, source)
        features = {name: Feature.from_json(name, spec, source) for name, spec in feats_raw.items()}
        for name, spec in DEFAULT_FEATURES.items():
            features.setdefault(name, Feature.from_json(name, spec, source))
        known = {f.name for f in cls.__dataclass_fields__.values()}  # type: ignore[attr-defined]
        default_data = DEFAULT_DATA_PATH
        default_video = DEFAULT_VIDEO_PATH if any(f.is_video for f in features.values()) else None
        info = cls(
            codebase_version=version,
            fps=int(fps),
            features=features,
            total_episodes=_field(raw, "total_episodes", int, source),
            total_frames=_field(raw, "total_frames", int, source),
            total_tasks=_field(raw, "total_tasks", int, source, default=0),
            chunks_size=_field(raw, "chunks_size", int, source, default=DEFAULT_CHUNKS_SIZE),
            data_files_size_in_mb=_field(raw, "data_files_size_in_mb", (int, float), source, default=DEFAULT_DATA_FILE_MB),
            video_files_size_in_mb=_field(raw, "video_files_size_in_mb", (int, float), source, default=DEFAULT_VIDEO_FILE_MB),
            data_path=_field(raw, "data_path", str, source, default=default_data),
            video_path=_field(raw, "video_path", str, source, default=default_video, allow_none=True),
            robot_type=_field(raw, "robot_type", str, source, default=None, allow_none=True),
            splits=_field(raw, "splits", dict, source, default={}),
            extra={k: v for k, v in raw.items() if k not in known},
        )
        for name in ("total_episodes", "total_frames", "chunks_size"):
            if getattr(info, name) < 0 or (name == "chunks_size" and info.chunks_size == 0):
                raise DatasetFormatError(f"{source}: field {name!r} has an invalid value {getattr(info, name)!r}")
        if info.video_keys and not info.video_path:
            raise DatasetFormatError(f"{source}: features {info.video_keys} are videos but 'video_path' is empty")
        return info

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "meta/info.json") -> "DatasetInfo":
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
    def data_file(self, chunk_index: int, file_index: int) -> str:
        return self.data_path.format(chunk_index=chunk_index, file_index=file_index)

    def video_file(self, video_key: str, chunk_index: int, file_index: int) -> str:
        assert self.video_path is not None
        return self.video_path.format(video_key=video_key, chunk_index=chunk_index, file_index=file_index)

    def camera_hw(self, key: str) -> tuple[int, int, int]:
        """(height, width, channels) of a camera, from its names when they say the order."""
        f = self.features[key]
        names = f.names if isinstance(f.names, list) else None
        if names and len(names) == 3 and names[0] in ("channels", "channel", "c"):
            c, h, w = f.shape
            return h, w, c
        h, w, c = f.shape
        return h, w, c
