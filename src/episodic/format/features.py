"""Feature descriptions from info.json (`{"dtype", "shape", "names", "info"}`) as small frozen objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import DatasetFormatError

#: Columns every LeRobot dataset has, in LeRobot's order.
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

CAMERA_DTYPES = ("video", "image")


@dataclass(frozen=True)
class Feature:
    name: str
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def is_video(self) -> bool:
        return self.dtype == "video"

    @property
    def is_image(self) -> bool:
        return self.dtype == "image"

    @property
    def is_camera(self) -> bool:
        return self.dtype in CAMERA_DTYPES

    @property
    def is_scalar(self) -> bool:
        """Shape (1,) features come out as 0-d values, like LeRobot's."""
        return self.shape == (1,)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}
        if self.info:
            out["info"] = self.info
        return out

    @classmethod
    def from_json(cls, name: str, spec: Any, source: str = "info.json") -> "Feature":
        where = f"{source}: feature {name!r}"
        if "/" in name:
            raise DatasetFormatError(f"{where}: feature names must not contain '/'")
        if not isinstance(spec, dict):
            raise DatasetFormatError(f"{where}: expected an object, got {type(spec).__name__}")
        dtype = spec.get("dtype")
        if not isinstance(dtype, str):
            raise DatasetFormatError(f"{where}: field 'dtype' must be a string, got {dtype!r}")
        shape = spec.get("shape")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise DatasetFormatError(f"{where}: field 'shape' must be a list of non-negative ints, got {shape!r}")
        info = spec.get("info") or {}
        if not isinstance(info, dict):
            raise DatasetFormatError(f"{where}: field 'info' must be an object, got {info!r}")
        if dtype in CAMERA_DTYPES and len(shape) != 3:
            raise DatasetFormatError(f"{where}: a camera needs shape [height, width, channels], got {shape!r}")
        return cls(name=name, dtype=dtype, shape=tuple(int(s) for s in shape), names=spec.get("names"), info=info)
