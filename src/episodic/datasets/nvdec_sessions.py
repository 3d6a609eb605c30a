"""Decoder sessions for `gpu_frames`: `NvdecBackend`, the one class that calls the GPU decode library
(PyNvVideoCodec's SimpleDecoder: planar RGB frames in device memory by frame index), and `SessionPool`, at most
`size` sessions in flight (NVDEC has a few engines: 7 on an H100/H200), each used by one thread at a time and
reused across files (opening a session costs ~50-70 ms; an idle one is reconfigured for the next file)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import torch

from ..format.errors import GpuDecodeError, VideoDecodeError

__all__ = ["NvdecBackend", "SessionPool"]


class NvdecBackend:
    """PyNvVideoCodec's SimpleDecoder: planar RGB (CHW) uint8 frames in device memory, by frame index."""

    def __init__(self, gpu_id: int):
        try:
            import PyNvVideoCodec as nvc
        except ImportError as e:
            raise GpuDecodeError(
                f"decode_device='cuda' needs PyNvVideoCodec: pip install \"episodic[gpu]\" ({e})"
            ) from None
        self.nvc, self.gpu_id = nvc, gpu_id
        self.name = f"PyNvVideoCodec {getattr(nvc, '__version__', '?')}"

    def open(self, path: str):
        return self.nvc.SimpleDecoder(
            path, gpu_id=self.gpu_id, use_device_memory=True, output_color_type=self.nvc.OutputColorType.RGBP
        )

    def reopen(self, session, path: str):
        session.reconfigure_decoder(path)
        return session

    def frames(self, session, indices: list[int]) -> torch.Tensor:
        got = session.get_batch_frames_by_index(indices)
        if len(got) != len(indices):  # the library skips indices it cannot seek to, with a warning only
            raise VideoDecodeError(f"NVDEC returned {len(got)} frames for the {len(indices)} asked for")
        return torch.stack([torch.from_dlpack(f) for f in got])

    def close(self, session) -> None:
        pass  # freed with the object


class SessionPool:
    """At most `size` decoder sessions of `backend`, each used by one thread at a time; a session idle on the
    file asked for is taken first, else a new one while fewer than `size` exist, else the least recently used
    idle one is reconfigured for the file (`backend.reopen`), else the caller waits."""

    def __init__(self, backend, size: int):
        self.backend, self.size = backend, int(size)
        self._idle: OrderedDict[str, list] = OrderedDict()  # path -> idle sessions on it
        self._count = 0
        self._cond = threading.Condition()
        self.opened = self.reopened = 0

    def acquire(self, path: str):
        reuse = None
        with self._cond:
            while True:
                same = self._idle.get(path)
                if same:
                    session = same.pop()
                    if not same:
                        del self._idle[path]
                    return session
                if self._count < self.size:
                    self._count += 1
                    break
                if self._idle:
                    old, sessions = next(iter(self._idle.items()))  # the least recently used file's
                    reuse = sessions.pop()
                    if not sessions:
                        del self._idle[old]
                    break
                self._cond.wait()
        try:
            if reuse is not None:
                session = self.backend.reopen(reuse, path)
                self.reopened += 1
            else:
                session = self.backend.open(path)
                self.opened += 1
        except BaseException:
            self.drop()
            raise
        return session

    def drop(self) -> None:
        """A session that failed is not reused: its place is freed."""
        with self._cond:
            self._count -= 1
            self._cond.notify()

    def release(self, path: str, session) -> None:
        with self._cond:
            self._idle.setdefault(path, []).append(session)
            self._idle.move_to_end(path)
            self._cond.notify()

    def discard(self) -> None:
        with self._cond:
            self._idle.clear()
            self._count = 0
