"""Feature descriptions from info.json (`{"dtype", "shape", "names", "info"}`) as small frozen objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .depth import DepthCoding, is_depth_map
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
# The numeric dtypes a feature of rows may have (what the writer writes and a mixture can stack).
NUMERIC_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)

#: Keys every item gets besides the features: a feature of that name would be overwritten in items.
ITEM_KEYS = ("task",)
PAD_SUFFIX = "_is_pad"  # `<key>_is_pad`: the pad mask of a window


def reserved_name_problem(name: str) -> str | None:
    """Why a feature may not be called `name` (None when it may): items already use the key."""
    if name in ITEM_KEYS:
        return f"the name {name!r} is the item key of the task string"
    if name.endswith(PAD_SUFFIX):
        return f"names ending in {PAD_SUFFIX!r} are the item keys of window pad masks"
    return None


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
    def is_depth(self) -> bool:
        """A depth map (``info.is_depth_map``; `format.depth`)."""
        return is_depth_map(self.info)

    @cached_property
    def depth(self) -> DepthCoding | None:
        """A depth camera's quantisation and recorded unit (`format.depth.DepthCoding`); None for any other
        feature."""
        return DepthCoding.from_info(self.info, f"feature {self.name!r}") if self.is_depth else None

    @property
    def depth_coding(self) -> DepthCoding:
        """`depth` of a feature known to be a depth camera (`is_depth`); ValueError for any other feature."""
        coding = self.depth
        if coding is None:
            raise ValueError(f"feature {self.name!r} is not a depth camera")
        return coding

    def camera_problem(self, channels: int) -> str | None:
        """Why this camera (of `channels` channels, as info.json gives them) cannot be read, None when it can: a
        depth map is a video of 1 channel, any other camera a colour (3) or grey (1) one read as RGB. A camera of
        another kind is refused, never handed out as frames of another shape."""
        if self.is_depth:
            if not self.is_video:
                return (
                    f"camera {self.name!r} is a depth map stored as images: episodic reads depth maps stored "
                    f"as video only"
                )
            if channels != 1:
                return f"depth camera {self.name!r} has {channels} channels; a depth map has 1"
            return None
        if channels not in (1, 3):
            return (
                f"camera {self.name!r} has {channels} channels: episodic reads colour (3) and grey (1) cameras, "
                f"and depth maps (1 channel, info.is_depth_map)"
            )
        return None

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
    def from_json(cls, name: str, spec: Any, source: str = "info.json") -> Feature:
        where = f"{source}: feature {name!r}"
        if "/" in name:
            raise DatasetFormatError(f"{where}: feature names must not contain '/'")
        reserved = reserved_name_problem(name)
        if reserved:
            raise DatasetFormatError(f"{where}: {reserved}; rename the feature")
        if not isinstance(spec, dict):
            raise DatasetFormatError(f"{where}: expected an object, got {type(spec).__name__}")
        dtype = spec.get("dtype")
        if not isinstance(dtype, str):
            raise DatasetFormatError(f"{where}: field 'dtype' must be a string, got {dtype!r}")
        if dtype not in (*CAMERA_DTYPES, "string") and not _numeric_dtype(dtype):
            raise DatasetFormatError(
                f"{where}: field 'dtype' {dtype!r} is not a numeric numpy dtype, 'string', 'video' or 'image'"
            )
        shape = spec.get("shape")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise DatasetFormatError(f"{where}: field 'shape' must be a list of non-negative ints, got {shape!r}")
        info = spec.get("info") or {}
        if not isinstance(info, dict):
            raise DatasetFormatError(f"{where}: field 'info' must be an object, got {info!r}")
        if not shape:
            raise DatasetFormatError(f"{where}: field 'shape' must not be empty (a scalar is [1])")
        if dtype in CAMERA_DTYPES and len(shape) != 3:
            raise DatasetFormatError(f"{where}: a camera needs shape [height, width, channels], got {shape!r}")
        if is_depth_map(info):  # its quantisation checked here (fields named), once
            DepthCoding.from_info(info, where)
        return cls(name=name, dtype=dtype, shape=tuple(int(s) for s in shape), names=spec.get("names"), info=info)


def _numeric_dtype(name: str) -> bool:
    try:
        return np.dtype(name).kind in "biuf"
    except (TypeError, ValueError):
        return False
