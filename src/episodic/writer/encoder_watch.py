"""A video encoder that stops making progress is given up on instead of waited for.

SVT-AV1 4.1 (as PyAV 18.1 bundles it) was seen to stop for good, at random, on a loaded 2-core machine: inside
its flush (`stream.encode(None)`) and inside `stream.encode(frame)`, waiting without CPU, in writers of AV1 gop=2
at 96x128 and 480x640 (a fresh process hung at its first episode; three writers at once at 480x640 hung once in
~150 files). `watched` runs an encoder's work on a thread and raises `EncoderStalled` when the work reports no
progress (`tick`) for `config.encoder_stall_timeout_s()`; the stalled thread is left behind (it holds no lock of
ours and waits without CPU) and whatever it uses must never be closed or freed: the writer drops the file and
encodes it again from its frames with a fresh encoder (`video.encode_file`).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .. import config

__all__ = ["LEFT_BEHIND", "EncoderStalled", "leave_behind", "watched"]

T = TypeVar("T")


# What stalled encoders use, kept for the life of the process: never closed under their thread, and never
# freed either, not even when the interpreter exits (the thread may still wake inside it; PyAV 15 crashes
# freeing an output container left open mid-file: the lowest-versions suite died of SIGSEGV in the garbage
# collector at its end).
LEFT_BEHIND: list = []


def leave_behind(obj) -> None:
    """Keep `obj` (a stalled encoder's writer, and through it its container, stream and file) alive until the
    process ends: one reference more than anything will ever drop, so no collection frees it."""
    LEFT_BEHIND.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


class EncoderStalled(Exception):
    """An encoder made no progress for `config.encoder_stall_timeout_s()`: it is taken for hung."""


def watched(work: Callable[[Callable[[], None]], T], label: str) -> T:
    """`work(tick)` run on a thread, its result or its exception; `work` calls `tick()` whenever it makes progress
    (a frame encoded, a packet muxed). `EncoderStalled`, naming `label`, when no tick (nor the end) comes within
    the timeout; also when this thread is interrupted while it waits (the work may be inside the encoder)."""
    last = [time.monotonic()]
    result: dict = {}

    def tick() -> None:
        last[0] = time.monotonic()

    def run() -> None:
        try:
            result["value"] = work(tick)
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            result["error"] = e

    thread = threading.Thread(target=run, name="episodic-encoder", daemon=True)
    thread.start()
    timeout = config.encoder_stall_timeout_s()
    while thread.is_alive():
        thread.join(min(1.0, timeout))
        if thread.is_alive() and time.monotonic() - last[0] > timeout:
            raise EncoderStalled(
                f"{label}: the encoder made no progress for {timeout:g} s "
                f"(EPISODIC_ENCODER_STALL_TIMEOUT); it is left behind"
            )
    if "error" in result:
        raise result["error"]
    return result["value"]
