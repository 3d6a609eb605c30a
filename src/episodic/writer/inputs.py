"""What the writer accepts: feature descriptions (checked when a writer opens) and episodes and task strings
(checked in `add_episode` before anything is written). Every error is a `WriterInputError` naming the episode
and the field."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..format.errors import DatasetFormatError, WriterInputError
from ..format.features import DEFAULT_FEATURES, NUMERIC_DTYPES, Feature

WRITABLE_DTYPES = (*NUMERIC_DTYPES, "string", "video")
# One frame of one feature is at most this many bytes: a parquet page (and an Arrow list size) holds no more.
MAX_FRAME_BYTES = 2**31 - 1
# FFmpeg takes no picture of width w and height h with (8 * w + 1024) * (h + 128) >= 2^31 - 1 (its
# av_image_check_size; about 268 million pixels): larger cameras are refused before a frame is allocated.
_FFMPEG_PICTURE_LIMIT = 2**31 - 1
# Unicode categories a task string must not contain: control characters (terminal escapes, newlines, tabs),
# lone surrogates (not representable in UTF-8, so not in a parquet file), line and paragraph separators.
_BAD_CATEGORIES = ("Cc", "Cs", "Zl", "Zp")


def _bad_char(text: str) -> str | None:
    for c in text:
        if unicodedata.category(c) in _BAD_CATEGORIES:
            return f"U+{ord(c):04X}"
    return None


def check_features(features: Any) -> dict[str, Feature]:
    """The writer's features: the user's (validated) with LeRobot's default columns; defaults may be listed
    only with their own dtype and shape (they are written by the writer)."""
    if not isinstance(features, Mapping) or not features:
        raise WriterInputError(
            f"features must be a non-empty mapping of name -> {{'dtype', 'shape'}}, got {features!r}"
        )
    out: dict[str, Feature] = {}
    for name, spec in features.items():
        if not isinstance(name, str) or not name.strip():
            raise WriterInputError(f"feature names must be non-empty strings, got {name!r}")
        where = f"feature {name!r}"
        bad = _bad_char(name)
        if bad:
            raise WriterInputError(f"{where}: the name contains the control character {bad}")
        if not isinstance(spec, Mapping):
            raise WriterInputError(f"{where}: expected a mapping with 'dtype' and 'shape', got {spec!r}")
        try:  # also refuses the names of keys the loader adds to items ('task', '<key>_is_pad')
            f = Feature.from_json(name, {"names": None, **spec}, "features")
        except DatasetFormatError as e:
            raise WriterInputError(str(e)) from None
        if name in DEFAULT_FEATURES:
            default = Feature.from_json(name, DEFAULT_FEATURES[name])
            if (f.dtype, f.shape) != (default.dtype, default.shape):
                raise WriterInputError(
                    f"{where}: written by the writer as {default.dtype} {list(default.shape)}, "
                    f"declared as {f.dtype} {list(f.shape)}; leave it out"
                )
            out[name] = default
            continue
        if f.is_image:
            raise WriterInputError(f"{where}: 'image' features are not written by episodic; use 'video'")
        if f.dtype not in WRITABLE_DTYPES:
            raise WriterInputError(
                f"{where}: dtype {f.dtype!r} is not one the writer stores; use one of {', '.join(WRITABLE_DTYPES)}"
            )
        if not f.shape or any(s < 1 for s in f.shape):
            raise WriterInputError(f"{where}: shape must be a non-empty list of positive ints, got {list(f.shape)}")
        if f.is_video and f.is_depth:
            if f.shape[2] != 1:
                raise WriterInputError(f"{where}: a depth camera needs shape [height, width, 1], got {list(f.shape)}")
            if f.depth_coding.unit is None:  # the unit of the depth given, and of its statistics: metres unless told
                f = Feature(f.name, f.dtype, f.shape, f.names, {**f.info, "depth_unit": "m"})
        elif f.is_video and f.shape[2] != 3:
            raise WriterInputError(
                f"{where}: a video camera needs shape [height, width, 3] (RGB), or [height, width, "
                f"1] with info.is_depth_map (depth), got {list(f.shape)}"
            )
        _check_size(where, f)
        if f.dtype == "string" and f.shape != (1,):
            raise WriterInputError(f"{where}: a string feature has shape [1], got {list(f.shape)}")
        out[name] = f
    for name, spec in DEFAULT_FEATURES.items():
        out.setdefault(name, Feature.from_json(name, spec))
    return out


def _check_size(where: str, f: Feature) -> None:
    """Refuse a shape no file can hold before anything is sized by it (a schema, the encoder probe's frame)."""
    if f.is_video:
        h, w, _ = f.shape
        aligned_w, aligned_h = -(-w // 16) * 16, -(-h // 16) * 16  # FFmpeg checks the 16-aligned size too
        if (8 * aligned_w + 1024) * (aligned_h + 128) >= _FFMPEG_PICTURE_LIMIT:
            raise WriterInputError(
                f"{where}: {w}x{h} frames are larger than FFmpeg encodes (about 268 million "
                f"pixels at most); a video camera needs a smaller shape than {list(f.shape)}"
            )
        return
    itemsize = np.dtype(f.dtype).itemsize if f.dtype in NUMERIC_DTYPES else 1
    nbytes = math.prod(f.shape) * itemsize
    if nbytes > MAX_FRAME_BYTES:
        raise WriterInputError(
            f"{where}: one frame of shape {list(f.shape)} {f.dtype} is {nbytes:,} bytes; the writer "
            f"stores at most {MAX_FRAME_BYTES:,} bytes (2 GiB) per frame and feature (a parquet page)"
        )


def check_tasks(ep: int, task: Any, n: int) -> list[str]:
    """One task string per frame: `task` is one string, or a sequence of `n` strings."""
    if isinstance(task, str):
        check_task_string(ep, task)
        return [str(task)] * n
    if isinstance(task, (bytes, bytearray, Mapping)) or not isinstance(task, Iterable):
        raise WriterInputError(
            f"episode {ep}: task must be a string or a sequence of {n} strings (one per frame), "
            f"got {type(task).__name__}"
        )
    tasks = list(task)
    if len(tasks) != n:
        raise WriterInputError(f"episode {ep}: {len(tasks)} task strings for {n} frames")
    for t in tasks:
        if not isinstance(t, str):
            check_task_string(ep, t)  # raises, naming the type
    for t in dict.fromkeys(tasks):
        check_task_string(ep, t)
    return [str(t) for t in tasks]


def check_task_string(ep: int, task: Any) -> None:
    if not isinstance(task, str):
        raise WriterInputError(f"episode {ep}: a task must be a str, got {type(task).__name__} {task!r}")
    if not task.strip():
        raise WriterInputError(f"episode {ep}: a task must be a non-empty string, got {task!r}")
    bad = _bad_char(task)
    if bad:
        raise WriterInputError(f"episode {ep}: task {task!r} contains the control character {bad}")


def check_episode(ep: int, frames: Any, features: Mapping[str, Feature]) -> tuple[int, dict[str, np.ndarray]]:
    """The episode's number of frames and its arrays (one row per frame), checked against the features."""
    if not isinstance(frames, Mapping):
        raise WriterInputError(f"episode {ep}: expected a mapping of feature -> array, got {type(frames).__name__}")
    user = [k for k in features if k not in DEFAULT_FEATURES]
    missing = [k for k in user if k not in frames]
    unknown = [k for k in frames if k not in features]
    written = [k for k in frames if k in DEFAULT_FEATURES]
    if missing or unknown or written:
        raise WriterInputError(
            f"episode {ep}: missing features {missing}, unknown features {unknown}"
            + (f", features the writer writes itself {written}" if written else "")
        )
    arrays = {k: _check_array(ep, features[k], frames[k]) for k in user}
    lengths = {k: len(a) for k, a in arrays.items()}
    n = next(iter(lengths.values()))
    if n == 0 or any(v != n for v in lengths.values()):
        raise WriterInputError(f"episode {ep}: every feature needs the same positive number of frames, got {lengths}")
    return n, arrays


def _check_array(ep: int, f: Feature, value: Any) -> np.ndarray:
    where = f"episode {ep}: feature {f.name!r}"
    try:
        a = np.asarray(value, dtype=object if f.dtype == "string" else None)
    except ValueError as e:  # ragged nested sequences
        raise WriterInputError(f"{where}: not a regular array ({e})") from None
    if a.ndim == 0:
        raise WriterInputError(f"{where}: needs one row per frame, got a single value {value!r}")
    if f.is_video and f.is_depth:  # distances in the feature's depth_unit: metres (floats) or millimetres (ints)
        h, w, _ = f.shape
        kind = "f" if f.depth_coding.unit == "m" else "iu"
        if a.dtype.kind not in kind or a.shape[1:] not in ((h, w), (h, w, 1)):
            want = "float metres" if f.depth_coding.unit == "m" else "integer millimetres"
            raise WriterInputError(
                f"{where}: a depth camera with depth_unit {f.depth_coding.unit!r} needs {want} of shape "
                f"(T, {h}, {w}, 1), got {a.dtype} {a.shape}"
            )
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise WriterInputError(f"{where}: depth values must be finite (a missing depth is 0)")
        return a.reshape(len(a), h, w, 1)
    if f.is_video:
        h, w, c = f.shape
        if a.dtype != np.uint8 or a.shape[1:] != (h, w, c):
            raise WriterInputError(
                f"{where}: camera needs uint8 frames of shape (T, {h}, {w}, {c}), got {a.dtype} {a.shape}"
            )
        return a
    per_frame = a.shape[1:] or (1,)
    if tuple(per_frame) != f.shape:
        raise WriterInputError(f"{where}: values of shape {tuple(per_frame)} per frame, declared {list(f.shape)}")
    if f.dtype == "string":
        flat = a.reshape(-1)
        bad = next((v for v in flat if not isinstance(v, str)), None)
        if bad is not None:
            raise WriterInputError(f"{where}: a string feature needs str values, got {type(bad).__name__} {bad!r}")
        return flat
    target = np.dtype(f.dtype)
    if a.dtype.kind not in "biuf":
        raise WriterInputError(f"{where}: needs numbers, got values of dtype {a.dtype}")
    if not np.can_cast(a.dtype, target, casting="same_kind"):
        raise WriterInputError(f"{where}: {a.dtype} values cannot be stored as {f.dtype} without changing them")
    if a.dtype.kind in "iu" and target.kind in "iu" and not np.can_cast(a.dtype, target) and a.size:
        lo, hi = np.iinfo(target).min, np.iinfo(target).max
        if a.min() < lo or a.max() > hi:
            raise WriterInputError(f"{where}: values in [{a.min()}, {a.max()}] do not fit {f.dtype}")
    return a
