"""The codec contexts that video readers decode through (`SharedDecoders`): a process's first few open readers of
files alike keep their stream's own, the others share a few contexts of their thread, made like their streams'
(codec, extradata, size, pixel format, colour parameters, time base: `stream_signature`)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

import av

from .. import runtime

if TYPE_CHECKING:
    from .decoder import VideoReader

# What a codec context is made from: the stream's codec and the parameters that shape its decoded pictures. Files
# whose streams agree on all of them decode alike through one context.
_COPIED = ("width", "height", "pix_fmt", "colorspace", "color_range", "color_primaries", "color_trc")


def stream_signature(stream, thread_count: int) -> int | None:
    """The number of what a shared decoder of this stream must be made with (`SharedDecoders`), the same for
    streams alike in this process; None where PyAV cannot read one of its parameters (the reader then decodes
    with the stream's own context)."""
    cc = stream.codec_context
    try:
        values = tuple(getattr(cc, a) for a in _COPIED)
        extradata = bytes(cc.extradata or b"")
    except (AttributeError, RuntimeError, ValueError):
        return None
    signature = (cc.name, extradata, values, str(stream.time_base), thread_count)
    with _SIGNATURES_LOCK:
        return _SIGNATURES.setdefault(signature, len(_SIGNATURES))


_SIGNATURES: dict[tuple, int] = {}  # the signatures of this process's streams, numbered
_SIGNATURES_LOCK = threading.Lock()


def _signature_of(number: int) -> tuple:
    with _SIGNATURES_LOCK:
        return next(sig for sig, n in _SIGNATURES.items() if n == number)


class SharedDecoder:
    """A codec context of one thread that readers of files alike take turns on: the reader that last sought it
    (`owner`) feeds it that file's packets; another reader taking it flushes it first."""

    def __init__(self, signature: int):
        name, extradata, values, _, thread_count = _signature_of(signature)
        ctx = av.CodecContext.create(name, "r")
        for attr, value in zip(_COPIED, values):
            setattr(ctx, attr, value)
        if extradata:
            ctx.extradata = extradata
        ctx.thread_count = thread_count
        self.ctx: Any = ctx
        self.signature = signature
        self.owner: VideoReader | None = None  # the reader that last took it
        self.thread = threading.get_ident()
        self.used = 0  # when its thread last handed it out (a count)


class SharedDecoders:
    """The decoders of this process, per thread: up to `per_signature` for files alike (cameras read forward in turn
    each keep theirs, so a reader decodes on from where it was), `per_thread` in all. A reader that reads forward
    (`VideoReader.reads_forward`) takes a new one while there are fewer, else the least recently used, one no
    other forward reader holds if any; a reader of random frames takes the most recently used one no forward
    reader holds (over many files: the same one, its pictures hot in the CPU's caches).

    A video file's open reader then holds its demuxer and frame index only (~70 KB at 480x640, measured), not a
    codec context with its pictures (~1.5 MB): a map-style mixture of 800 one-episode files at 480x640 keeps
    every file open within its budget. After a fork a child starts with none and never touches its parent's."""

    def __init__(self, per_signature: int = 4, per_thread: int = 16, own: int = 8):
        self.per_signature, self.per_thread, self.own = per_signature, per_thread, own
        self._local = threading.local()
        self._owning: dict[int, int] = {}  # signature -> open readers of this process decoding with their own
        self._lock = threading.Lock()
        runtime.after_fork(self)

    def _after_fork(self) -> None:
        runtime.keep_inherited(self._local)  # never used or freed here: their FFmpeg objects are the parent's
        self._local = threading.local()
        self._owning, self._lock = {}, threading.Lock()  # the parent's readers are never used here

    def admit(self, reader: VideoReader, signature: int | None) -> tuple[int | None, weakref.finalize | None]:
        """`reader`'s signature, or None when it decodes with its stream's own codec context: while fewer than
        `own` open readers of this process with that signature do (a dataset's few files: PyAV's own decode
        loop, ~2% less CPU per frame at 96x128 than feeding a shared context packet by packet from Python); with
        the call that gives its place back (when it is closed, else when it is collected)."""
        if signature is None:
            return None, None
        with self._lock:
            n = self._owning.get(signature, 0)
            if n >= self.own:
                return signature, None
            self._owning[signature] = n + 1
        return None, weakref.finalize(reader, self._release, signature, self._owning)

    def _release(self, signature: int, owning: dict[int, int]) -> None:
        with self._lock:
            if owning is self._owning and owning.get(signature, 0) > 0:
                owning[signature] -= 1

    def take(self, signature: int, reader: VideoReader, last: SharedDecoder | None) -> SharedDecoder:
        """A flushed decoder of this thread for `reader`'s files, now owned by it: `last` (the one it had) when
        it still owns it, else as the class says."""
        local = self._local
        pools: dict[int, list[SharedDecoder]] | None = getattr(local, "pools", None)
        if pools is None:
            pools = local.pools = {}
            local.clock = 0
        mine = pools.setdefault(signature, [])  # least recently used first
        if last is not None and last.owner is reader and last in mine:
            pick: SharedDecoder | None = last
        elif mine and not reader.reads_forward and not getattr(mine[-1].owner, "reads_forward", False):
            pick = mine[-1]  # random access (below: `free[-1]`, here found without listing the free ones)
        else:
            free = [d for d in mine if not getattr(d.owner, "reads_forward", False)]
            pick = None
            if free and not reader.reads_forward:
                pick = free[-1]  # random access: the most recently used, its pictures still in the CPU's caches
            elif len(mine) >= self.per_signature:
                pick = free[0] if free else mine[0]  # the least recently used, one no reader reads forward if any
        if pick is None:
            pick = SharedDecoder(signature)
            if sum(map(len, pools.values())) >= self.per_thread:
                lru = min((d for ds in pools.values() for d in ds), key=lambda d: d.used)
                pools[lru.signature].remove(lru)
                lru.ctx = lru.owner = None
        else:
            mine.remove(pick)
            pick.ctx.flush_buffers()
        mine.append(pick)
        local.clock += 1
        pick.owner, pick.used = reader, local.clock
        return pick


SHARED = SharedDecoders()  # this process's
