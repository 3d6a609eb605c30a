"""Depth cameras (LeRobot 0.6): how distances are stored as 12-bit video codes and read back.

A depth camera is a ``video`` feature of shape [height, width, 1] whose ``info`` says ``"is_depth_map": true``
(LeRobot's older marker ``"video.is_depth_map"`` counts too). Its frames are 12-bit codes (0..`QMAX`), encoded
losslessly (HEVC, pixel format ``gray12le``); its ``info`` holds the quantisation, `DepthCoding`:
``video.depth_min`` / ``video.depth_max`` (metres: the depths at codes 0 and `QMAX`), ``video.shift`` (metres,
added before the logarithm) and ``video.use_log`` (logarithmic codes, the default, or linear); a field left out
takes LeRobot's default (0.01, 10.0, 3.5, true). ``depth_unit`` ("m" or "mm") is the unit the depth was recorded
in, which is the unit of its statistics.

Reading (LeRobot 0.6.1's ``dequantize_depth``, float32 throughout as its torch path computes it): with
``scale = (depth_max - depth_min) / QMAX`` and ``offset = depth_min`` (linear), or ``scale = (log(depth_max + shift)
- log(depth_min + shift)) / QMAX`` and ``offset = log(depth_min + shift)`` (log), a code c gives
``d = c * scale + offset``, then ``d = exp(d) - shift`` (log), clamped to [depth_min, depth_max]: metres; in
millimetres ``d * 1000`` rounded to the nearest integer (ties to even) and clamped to [0, 65535], still float32.
Items are (1, H, W) float32 in the reader's unit ("mm", LeRobot 0.6.1's default, or "m"), whatever the frame
dtype asked for (`return_uint8` leaves them alone, image transforms skip them). `quantise` is the writer's inverse
(LeRobot's ``quantize_depth``: codes = rint(normalised * QMAX), clipped). numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DatasetFormatError

__all__ = ["DEPTH_UNITS", "DepthCoding", "QMAX", "is_depth_map", "rescale_stats", "unit_factor"]

BITS = 12
QMAX = (1 << BITS) - 1  # 4095
PIX_FMT = "gray12le"
DEPTH_UNITS = ("m", "mm")
DEFAULTS: dict[str, Any] = {"depth_min": 0.01, "depth_max": 10.0, "shift": 3.5, "use_log": True}
MM_PER_M = 1000.0
_UINT16_MAX = 65535.0


def is_depth_map(info: Mapping[str, Any] | None) -> bool:
    """Whether a feature's ``info`` marks it a depth map (``is_depth_map``, or LeRobot's older
    ``video.is_depth_map``)."""
    info = info or {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map"))


def check_unit(unit: Any, name: str = "depth_output_unit") -> str:
    """`unit` if it is a depth unit; ValueError naming the allowed ones."""
    if unit not in DEPTH_UNITS:
        raise ValueError(f"{name} must be one of {', '.join(repr(u) for u in DEPTH_UNITS)}, got {unit!r}")
    return unit


def unit_factor(stored: str, output: str) -> float:
    """What a value in unit `stored` is multiplied by to be in unit `output`."""
    if stored == output:
        return 1.0
    return MM_PER_M if stored == "m" else 1.0 / MM_PER_M


@dataclass(frozen=True)
class DepthCoding:
    """A depth camera's quantisation (metres) and the unit its depth was recorded in (None: not recorded)."""

    depth_min: float = DEFAULTS["depth_min"]
    depth_max: float = DEFAULTS["depth_max"]
    shift: float = DEFAULTS["shift"]
    use_log: bool = DEFAULTS["use_log"]
    unit: str | None = None

    @classmethod
    def from_info(cls, info: Mapping[str, Any], where: str) -> DepthCoding:
        """The coding of a depth feature's ``info`` (`where` names the file and the feature); every bad field is
        a problem of the DatasetFormatError, naming the field."""
        problems: list[str] = []
        values: dict[str, Any] = {}
        for name, default in DEFAULTS.items():
            value = info.get(f"video.{name}")
            if value is None:
                values[name] = default
            elif name == "use_log":
                if not isinstance(value, bool):
                    problems.append(f"{where}: field 'info.video.use_log' must be true or false, got {value!r}")
                values[name] = bool(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                problems.append(f"{where}: field 'info.video.{name}' must be a finite number (metres), got {value!r}")
                values[name] = default
            else:
                values[name] = float(value)
        if values["depth_max"] <= values["depth_min"]:
            problems.append(
                f"{where}: field 'info.video.depth_max' ({values['depth_max']}) must be greater than "
                f"'info.video.depth_min' ({values['depth_min']})"
            )
        if values["use_log"] and values["depth_min"] + values["shift"] <= 0:
            problems.append(
                f"{where}: logarithmic depth codes need 'info.video.depth_min' + 'info.video.shift' > 0, "
                f"got {values['depth_min']} + {values['shift']}"
            )
        unit = info.get("depth_unit")
        if unit is not None and unit not in DEPTH_UNITS:
            problems.append(
                f"{where}: field 'info.depth_unit' must be one of {list(DEPTH_UNITS)} or absent, got {unit!r}"
            )
            unit = None
        if problems:
            raise DatasetFormatError(
                problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(problems),
                problems=problems,
            )
        return cls(unit=unit, **values)

    def info(self) -> dict[str, Any]:
        """The ``info`` entries of a feature with this coding (what the writer records)."""
        out: dict[str, Any] = {"is_depth_map": True}
        if self.unit is not None:
            out["depth_unit"] = self.unit
        out.update({f"video.{name}": getattr(self, name) for name in DEFAULTS})
        return out

    def _scale_offset(self) -> tuple[float, float]:
        if self.use_log:
            lo, hi = math.log(self.depth_min + self.shift), math.log(self.depth_max + self.shift)
            return (hi - lo) / QMAX, lo
        return (self.depth_max - self.depth_min) / QMAX, self.depth_min

    def dequantise(self, codes: np.ndarray, out: np.ndarray, unit: str) -> None:
        """Write the depths of 12-bit `codes` (any integer array) into float32 `out` (same shape) in `unit`
        ("m" or "mm"), as the module docstring says."""
        scale, offset = self._scale_offset()
        np.multiply(codes, np.float32(scale), out=out, dtype=np.float32)
        np.add(out, np.float32(offset), out=out)
        if self.use_log:
            np.exp(out, out=out)
            np.subtract(out, np.float32(self.shift), out=out)
        np.clip(out, np.float32(self.depth_min), np.float32(self.depth_max), out=out)
        if unit == "mm":
            np.multiply(out, np.float32(MM_PER_M), out=out)
            np.rint(out, out=out)
            np.clip(out, np.float32(0), np.float32(_UINT16_MAX), out=out)

    def quantise(self, depth: np.ndarray, unit: str) -> np.ndarray:
        """uint16 codes (0..QMAX) of `depth` in `unit` ("m": metres, "mm": millimetres), computed in that unit in
        float32 (LeRobot's ``quantize_depth``)."""
        d = np.asarray(depth).astype(np.float32)
        k = np.float32(1.0 if unit == "m" else MM_PER_M)
        lo, hi, shift = (np.float32(self.depth_min * k), np.float32(self.depth_max * k), np.float32(self.shift * k))
        if self.use_log:
            log_lo, log_hi = math.log(float(lo + shift)), math.log(float(hi + shift))
            norm = (np.log(d + shift) - np.float32(log_lo)) / np.float32(log_hi - log_lo)
        else:
            norm = (d - lo) / (hi - lo)
        return np.clip(np.rint(norm * np.float32(QMAX)), 0, QMAX).astype(np.uint16)


def rescale_stats(stats: dict, key: str, stored: str | None, output: str) -> None:
    """Bring feature `key`'s statistics (in `stats`, in place) from unit `stored` to `output` (LeRobot 0.6.1's
    ``rescale_depth_stats``: every entry but ``count`` multiplied); nothing when `stored` is None or the same."""
    if stored is None or stored == output or key not in stats:
        return
    factor = unit_factor(stored, output)
    stats[key] = {name: v if name == "count" else np.asarray(v) * factor for name, v in stats[key].items()}
