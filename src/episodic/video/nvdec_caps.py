"""What the machine's NVIDIA GPUs can decode, asked of the driver itself: `cuvidGetDecoderCaps` of libnvcuvid
(the Video Codec SDK's decode API, which every NVDEC library calls), through ctypes, so the answer needs
neither torch nor a decode library and is the same one a decoder would get when it opens.

Measured on a lent H200 (2026-11): AV1 "Codec not supported on this GPU" (PyNvVideoCodec error 801).
NVIDIA's decode matrix: A100, H100 and H200 have no AV1 NVDEC; L4, L40S, B200 (and Ada/Blackwell GPUs) have.
So an AV1 dataset on those GPUs decodes on the CPU, or is re-encoded once (`episodic reencode --vcodec h264`).

`probe_nvdec()` -> `NvdecProbe`: each GPU's name and, per codec asked for, `CodecSupport` (supported, NVDEC
engines, size limits); when no answer can be had (no driver, no libnvcuvid in the container, no GPU), `why`
says why in words. `container_video_driver()` reports what a container exposes (`NVIDIA_DRIVER_CAPABILITIES`
must include ``video`` for libnvcuvid to be mounted). `load_driver` is the one place the libraries are opened;
tests replace it (the capability query is all that is mocked).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

__all__ = [
    "CODEC_IDS",
    "CodecSupport",
    "GpuCaps",
    "NvdecProbe",
    "NvdecUnavailable",
    "container_video_driver",
    "load_driver",
    "gpu_refusal",
    "probe_nvdec",
    "reordered_reason",
    "unsupported_reason",
]

# cudaVideoCodec (cuviddec.h) by the codec's canonical FFmpeg name
CODEC_IDS = {
    "mpeg1video": 0,
    "mpeg2video": 1,
    "mpeg4": 2,
    "vc1": 3,
    "h264": 4,
    "mjpeg": 5,
    "hevc": 8,
    "vp8": 9,
    "vp9": 10,
    "av1": 11,
}
_CHROMA = {400: 0, 420: 1, 422: 2, 444: 3}  # cudaVideoChromaFormat
LIBCUDA, LIBNVCUVID = "libcuda.so.1", "libnvcuvid.so.1"


class NvdecUnavailable(RuntimeError):
    """No capability answer can be had on this machine (the message says why)."""


class _DecodeCaps(ctypes.Structure):
    """CUVIDDECODECAPS (cuviddec.h, Video Codec SDK 11-13); trailing room for fields a newer driver adds."""

    _fields_ = [
        ("eCodecType", ctypes.c_int),
        ("eChromaFormat", ctypes.c_int),
        ("nBitDepthMinus8", ctypes.c_uint),
        ("reserved1", ctypes.c_uint * 3),
        ("bIsSupported", ctypes.c_ubyte),
        ("nNumNVDECs", ctypes.c_ubyte),
        ("nOutputFormatMask", ctypes.c_ushort),
        ("nMaxWidth", ctypes.c_uint),
        ("nMaxHeight", ctypes.c_uint),
        ("nMaxMBCount", ctypes.c_uint),
        ("nMinWidth", ctypes.c_ushort),
        ("nMinHeight", ctypes.c_ushort),
        ("bIsHistogramSupported", ctypes.c_ubyte),
        ("nCounterBitDepth", ctypes.c_ubyte),
        ("nMaxHistogramBins", ctypes.c_ushort),
        ("reserved3", ctypes.c_uint * 26),
    ]


@dataclass(frozen=True)
class CodecSupport:
    """The driver's answer for one codec, chroma format and bit depth on one GPU."""

    codec: str
    chroma: int = 420
    bit_depth: int = 8
    supported: bool = False
    engines: int = 0  # NVDEC engines that decode it
    max_width: int = 0
    max_height: int = 0
    min_width: int = 0
    min_height: int = 0
    error: str | None = None  # the query itself failed

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class GpuCaps:
    index: int
    name: str
    codecs: dict[tuple[str, int, int], CodecSupport] = field(default_factory=dict)  # (codec, chroma, depth) ->


@dataclass
class NvdecProbe:
    """The machine's GPUs and what their NVDEC decodes; `why` when there is no answer at all."""

    gpus: list[GpuCaps] = field(default_factory=list)
    why: str | None = None

    def support(self, gpu: int, codec: str, chroma: int = 420, bit_depth: int = 8) -> CodecSupport | None:
        for g in self.gpus:
            if g.index == gpu:
                return g.codecs.get((codec, chroma, bit_depth))
        return None

    def gpu_name(self, gpu: int) -> str:
        return next((g.name for g in self.gpus if g.index == gpu), f"GPU {gpu}")

    def to_json(self) -> dict:
        return {
            "why": self.why,
            "gpus": [
                {"index": g.index, "name": g.name, "codecs": [s.to_json() for s in g.codecs.values()]}
                for g in self.gpus
            ],
        }


class _Driver:
    """libcuda + libnvcuvid through ctypes: device names, and cuvidGetDecoderCaps in each device's primary
    context (pushed for the query, popped after)."""

    def __init__(self, cuda, cuvid):
        self.cuda, self.cuvid = cuda, cuvid
        self._check(cuda.cuInit(0), "cuInit")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            get = getattr(self.cuda, "cuGetErrorName", None)
            if get is not None and get(rc, ctypes.byref(name)) == 0 and name.value:
                raise NvdecUnavailable(f"{what} failed: {name.value.decode()} ({rc})")
            raise NvdecUnavailable(f"{what} failed: CUDA error {rc}")

    def count(self) -> int:
        n = ctypes.c_int()
        self._check(self.cuda.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        return n.value

    def name(self, index: int) -> str:
        dev, buf = ctypes.c_int(), ctypes.create_string_buffer(256)
        self._check(self.cuda.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        self._check(self.cuda.cuDeviceGetName(buf, 256, dev), "cuDeviceGetName")
        return buf.value.decode(errors="replace")

    def caps(self, index: int, codec: str, chroma: int, bit_depth: int) -> CodecSupport:
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self._check(self.cuda.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
        release = getattr(self.cuda, "cuDevicePrimaryCtxRelease_v2", None) or self.cuda.cuDevicePrimaryCtxRelease
        push = getattr(self.cuda, "cuCtxPushCurrent_v2", None) or self.cuda.cuCtxPushCurrent
        pop = getattr(self.cuda, "cuCtxPopCurrent_v2", None) or self.cuda.cuCtxPopCurrent
        self._check(self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        try:
            self._check(push(ctx), "cuCtxPushCurrent")
            try:
                c = _DecodeCaps(
                    eCodecType=CODEC_IDS[codec], eChromaFormat=_CHROMA[chroma], nBitDepthMinus8=bit_depth - 8
                )
                rc = self.cuvid.cuvidGetDecoderCaps(ctypes.byref(c))
            finally:
                pop(ctypes.byref(ctypes.c_void_p()))
        finally:
            release(dev)
        if rc != 0:
            return CodecSupport(codec, chroma, bit_depth, error=f"cuvidGetDecoderCaps returned {rc}")
        return CodecSupport(
            codec,
            chroma,
            bit_depth,
            supported=bool(c.bIsSupported),
            engines=int(c.nNumNVDECs),
            max_width=int(c.nMaxWidth),
            max_height=int(c.nMaxHeight),
            min_width=int(c.nMinWidth),
            min_height=int(c.nMinHeight),
        )


def load_driver():
    """The driver's capability query (`_Driver`), or NvdecUnavailable saying which library is missing."""
    libs = []
    for name in (LIBCUDA, LIBNVCUVID):
        try:
            libs.append(ctypes.CDLL(name))
        except OSError as e:
            hint = (
                " (in a container: NVIDIA_DRIVER_CAPABILITIES must include 'video' for the runtime to mount it)"
                if name == LIBNVCUVID
                else " (no NVIDIA driver on this machine)"
            )
            raise NvdecUnavailable(f"{name} not found{hint}: {e}") from None
    return _Driver(*libs)


def probe_nvdec(codecs=(("h264", 420, 8), ("hevc", 420, 8), ("av1", 420, 8))) -> NvdecProbe:
    """Each GPU's name and the driver's answer for each (codec, chroma, bit depth) of `codecs`."""
    try:
        driver = load_driver()
        n = driver.count()
        if n == 0:
            return NvdecProbe(why="the NVIDIA driver sees no GPU")
        gpus = []
        for i in range(n):
            g = GpuCaps(i, driver.name(i))
            for codec, chroma, depth in codecs:
                if codec not in CODEC_IDS or chroma not in _CHROMA:
                    g.codecs[(codec, chroma, depth)] = CodecSupport(
                        codec, chroma, depth, error="NVDEC has no such codec or chroma format"
                    )
                    continue
                g.codecs[(codec, chroma, depth)] = driver.caps(i, codec, chroma, depth)
            gpus.append(g)
        return NvdecProbe(gpus=gpus)
    except NvdecUnavailable as e:
        return NvdecProbe(why=str(e))


def unsupported_reason(support: CodecSupport | None, height: int, width: int) -> str | None:
    """Why NVDEC cannot decode frames of this size with `support` (the driver's answer), or None when it can."""
    if support is None:
        return "the driver was not asked about this codec"
    if support.error:
        return support.error
    if not support.supported:
        return (
            f"NVDEC on this GPU has no {support.codec} decoder for {support.chroma} chroma at {support.bit_depth} bits"
        )
    if support.max_width and (width > support.max_width or height > support.max_height):
        return f"{width}x{height} exceeds NVDEC's {support.max_width}x{support.max_height}"
    if width < support.min_width or height < support.min_height:
        return f"{width}x{height} is under NVDEC's minimum {support.min_width}x{support.min_height}"
    return None


def reordered_reason(codec: str, reorders: bool | None) -> str | None:
    """Why a stream that NVDEC can decode is still not decoded on the GPU, or None. HEVC with B-frames: the decode
    library (PyNvVideoCodec 2.2.4's SimpleDecoder) seeks by frame index and does not reach every frame of such a
    file. Measured on a lent H100 (2026-11-26) on the HEVC that LeRobot 0.6.1 writes (x265's defaults): "End of
    stream reached while seeking to frame index 125" for the last of 126 frames; on an H200 (x265's defaults, the
    NVDEC probe) the same error at the last frame and one frame off by up to 198/255. H.264 with B-frames (LeRobot's
    H.264) and HEVC without them (episodic's writer) gave every frame within 2/255 on the H100."""
    if codec != "hevc" or reorders is False:
        return None
    what = "has B-frames" if reorders else "may have B-frames (its file was not read: a remote dataset)"
    return (
        f"the stream {what}: NVDEC's decode library does not seek to every frame of HEVC with B-frames "
        "(measured: it fails at a file's last frames, and returned a wrong frame)"
    )


def gpu_refusal(support: CodecSupport | None, facts) -> str | None:
    """Why a camera whose stream is `facts` (`stream_probe.StreamFacts`) is not decoded on the GPU (`support`: the
    driver's answer for its codec), or None: the driver's limits, then the decode library's (`reordered_reason`).
    The one decision that `decode_device="cuda"` and `episodic doctor` both take."""
    return unsupported_reason(support, facts.height, facts.width) or reordered_reason(facts.codec, facts.reorders)


def container_video_driver() -> dict:
    """What a container exposes of the video driver: NVIDIA_DRIVER_CAPABILITIES (needs ``video`` or ``all``
    for the runtime to mount libnvcuvid) and whether libnvcuvid loads."""
    caps = os.environ.get("NVIDIA_DRIVER_CAPABILITIES")
    try:
        ctypes.CDLL(LIBNVCUVID)
        found, error = True, None
    except OSError as e:
        found, error = False, str(e)
    return {
        "NVIDIA_DRIVER_CAPABILITIES": caps,
        "video_capability": None if caps is None else any(c.strip() in ("video", "all") for c in caps.split(",")),
        "libnvcuvid": found,
        "libnvcuvid_error": error,
    }
