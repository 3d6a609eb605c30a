"""Moving batches to an accelerator: uint8 frames cross (a quarter of the bytes), float32 is made there.

    batch = to_device(batch, "cuda", float_keys=ds.camera_keys)   # with return_uint8=True

gives the same float32 frames as the CPU path (LeRobot's ``x.float() / 255``) bit for bit: `frames_to_float`
divides by a 0-dim tensor on the frames' device. Dividing a CUDA tensor by the Python number 255 would not:
CUDA kernels turn a scalar divisor into a multiplication by its reciprocal, which differs from the division in
the last bit for some byte values.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def frames_to_float(u8: torch.Tensor) -> torch.Tensor:
    """uint8 frames on any device -> float32 in [0, 1] there, bit-identical to ``u8.cpu().float() / 255``."""
    return u8.float().div_(torch.full((), 255.0, dtype=torch.float32, device=u8.device))


def to_device(
    batch: dict, device: str | torch.device, float_keys: Iterable[str] = (), non_blocking: bool = True
) -> dict:
    """The batch with every tensor on `device` (asynchronously from pinned memory) and the uint8 frames of
    `float_keys` made float32 in [0, 1] there; other values (the 'task' strings) as they are."""
    keys = set(float_keys)
    out = {}
    for k, v in batch.items():
        if torch.is_tensor(v):
            v = v.to(device, non_blocking=non_blocking)
            if k in keys and v.dtype == torch.uint8:
                v = frames_to_float(v)
        out[k] = v
    return out
