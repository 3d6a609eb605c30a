"""`episodic doctor [DATASET]`: where this machine can decode video, and why.

Reports the versions that decide decoding (episodic, Python, torch and its CUDA, PyAV and its FFmpeg, the GPU
decode library PyNvVideoCodec), the GPUs and what their NVDEC decodes per codec (the driver's own answer,
`video.nvdec_caps`), whether a container exposes the video driver (``NVIDIA_DRIVER_CAPABILITIES`` with
``video``, libnvcuvid found); with a dataset, each camera's codec, pixel format and size, one frame decoded
by each backend available with its time, and for each camera which backend ``decode_device="cuda"`` would
use and why (or the error it would raise, and the fix). On a machine without a GPU it says so, and why.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DoctorReport", "doctor"]

CODECS = (("h264", 420, 8), ("hevc", 420, 8), ("av1", 420, 8), ("hevc", 420, 10), ("av1", 420, 10))


@dataclass
class DoctorReport:
    versions: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    cuda: dict[str, Any] = field(default_factory=dict)
    nvdec: dict[str, Any] = field(default_factory=dict)
    container: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    cameras: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def lines(self) -> list[str]:
        out = ["versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items())]
        out.append(f"machine: {self.machine['platform']}, {self.machine['cores']} usable CPU cores")
        c = self.cuda
        out.append(f"CUDA (torch): {', '.join(c['devices']) if c['available'] else 'no GPU: ' + c['why']}")
        d = self.container
        out.append(
            f"video driver: libnvcuvid {'found' if d['libnvcuvid'] else 'not found'}; "
            f"NVIDIA_DRIVER_CAPABILITIES={d['NVIDIA_DRIVER_CAPABILITIES']!r}"
            + (
                ""
                if d["video_capability"] in (None, True)
                else " (lacks 'video': a container runtime then mounts no libnvcuvid)"
                if not d["libnvcuvid"]
                else " (lacks 'video', but libnvcuvid is there)"  # seen on a lent H100: NVDEC worked
            )
        )
        if self.nvdec.get("why"):
            out.append(f"NVDEC: unavailable: {self.nvdec['why']}")
        for g in self.nvdec.get("gpus", []):
            table = ", ".join(
                f"{s['codec']}{'' if s['bit_depth'] == 8 else ' ' + str(s['bit_depth']) + '-bit'}: "
                + (
                    f"yes ({s['engines']} engines, up to {s['max_width']}x{s['max_height']})"
                    if s["supported"]
                    else "no"
                    if not s.get("error")
                    else f"? ({s['error']})"
                )
                for s in g["codecs"]
            )
            out.append(f"NVDEC on GPU {g['index']} ({g['name']}): {table}")
        if self.dataset:
            out.append(f"dataset: {self.dataset}")
        for cam in self.cameras:
            if "error" in cam:
                out.append(f"  {cam['key']}: {cam['error']}")
                continue
            times = ", ".join(
                f"{b} {t['ms']:.1f} ms" if "ms" in t else f"{b}: {t['error']}" for b, t in cam["decode"].items()
            )
            out.append(
                f"  {cam['key']}: {cam['codec']} {cam['pix_fmt']} {cam['width']}x{cam['height']}"
                f"{' B-frames' if cam.get('b_frames') else ''} ({cam['file']}); "
                f"one frame: {times or 'not decoded'}"
            )
            out.append(f"    decode_device='cuda': {cam['cuda']}")
        return out


def _versions() -> dict[str, Any]:
    import av

    import episodic

    v: dict[str, Any] = {"episodic": getattr(episodic, "__version__", "?"), "python": platform.python_version()}
    try:
        import torch

        v["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})" if torch.version.cuda else torch.__version__
    except ImportError as e:  # pragma: no cover - torch is a dependency
        v["torch"] = f"not importable ({e})"
    v["PyAV"] = av.__version__
    v["FFmpeg"] = getattr(av, "ffmpeg_version_info", None) or ".".join(map(str, av.library_versions["libavcodec"]))
    try:
        import PyNvVideoCodec as nvc

        v["PyNvVideoCodec"] = getattr(nvc, "__version__", "?")
    except Exception as e:  # noqa: BLE001  not installed, or its native part does not load here
        v["PyNvVideoCodec"] = (
            f"not available ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
            f'pip install "episodic[gpu]")'
        )
    return v


def _cuda() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        why = (
            "torch was built without CUDA"
            if torch.version.cuda is None
            else "torch sees no CUDA device (no NVIDIA GPU or driver here, or CUDA_VISIBLE_DEVICES hides them)"
        )
        return {"available": False, "why": why, "devices": []}
    return {
        "available": True,
        "why": None,
        "devices": [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())],
    }


def doctor(dataset: str | None = None, decode: bool = True) -> DoctorReport:
    """The report (see the module docstring); `decode`: time one frame per camera and backend."""
    from .. import runtime
    from ..video.nvdec_caps import container_video_driver, probe_nvdec

    r = DoctorReport(
        versions=_versions(),
        machine={"platform": platform.platform(), "cores": runtime.usable_cores(), "executable": sys.executable},
        cuda=_cuda(),
        nvdec=probe_nvdec(CODECS).to_json(),
        container=container_video_driver(),
    )
    if dataset is not None:
        r.dataset = str(dataset)
        r.cameras = _cameras(dataset, r, decode)
    return r


def _cameras(location: str, r: DoctorReport, decode: bool) -> list[dict]:
    from ..format.errors import EpisodicError
    from ..storage import open_source
    from ..video.stream_probe import probe_stream

    source = open_source(location)
    meta = source.load_metadata()
    out = []
    for key in meta.info.video_keys:
        rel = meta.video_file_of(0, key)
        try:
            path = source.local_path(rel)
            facts = probe_stream(path)
        except (EpisodicError, OSError) as e:
            out.append({"key": key, "error": str(e)})
            continue
        cam: dict[str, Any] = {
            "key": key,
            "file": rel,
            "codec": facts.codec,
            "pix_fmt": facts.pix_fmt,
            "b_frames": facts.reorders,
            "height": facts.height,
            "width": facts.width,
            "decode": {},
        }
        support = None
        for g in r.nvdec.get("gpus", []):
            if g["index"] == 0:
                support = next(
                    (
                        s
                        for s in g["codecs"]
                        if (s["codec"], s["chroma"], s["bit_depth"]) == (facts.codec, facts.chroma, facts.bit_depth)
                    ),
                    None,
                )
        why = _cuda_verdict(r, facts, support)
        cam["cuda"] = why
        if decode:
            cam["decode"]["cpu (PyAV)"] = _time_cpu(path)
            if why.startswith("NVDEC"):
                cam["decode"]["cuda (PyNvVideoCodec)"] = _time_gpu(path)
        out.append(cam)
    return out


def _cuda_verdict(r: DoctorReport, facts, support: dict | None) -> str:
    """What decode_device="cuda" does with a camera of `facts` (`support`: the driver's answer for it)."""
    from ..video.nvdec_caps import CodecSupport, gpu_refusal

    fix = "; fix: `episodic reencode SRC DST --vcodec h264`, or cpu_fallback=[camera], or decode_device='cpu'"
    if not r.cuda["available"]:
        return f"refused: {r.cuda['why']} (decode_device='cpu' decodes with PyAV on the CPU)"
    if r.nvdec.get("why"):
        return f"refused: NVDEC unavailable: {r.nvdec['why']}"
    if support is None:
        return f"refused: the driver was not asked about {facts.codec} {facts.pix_fmt}{fix}"
    why = gpu_refusal(CodecSupport(**support), facts)
    if why:
        return f"refused: {why}{fix}"
    if not r.versions["PyNvVideoCodec"][:1].isdigit():
        return 'refused: PyNvVideoCodec is not installed: pip install "episodic[gpu]"'
    return f"NVDEC on GPU 0 ({r.nvdec['gpus'][0]['name']}), {support['engines']} engine(s) for {facts.codec}"


def _time_cpu(path: str) -> dict:
    import numpy as np

    from ..video.decoder import VideoReader

    try:
        t0 = time.perf_counter()
        reader = VideoReader(path)
        t1 = time.perf_counter()
        reader.decode(np.array([len(reader.index) // 2]))
        t2 = time.perf_counter()
        reader.close()
        return {"ms": 1000 * (t2 - t1), "open_ms": 1000 * (t1 - t0)}
    except Exception as e:  # noqa: BLE001  reported, not raised: the doctor goes on
        return {"error": f"{type(e).__name__}: {e}"}


def _time_gpu(path: str) -> dict:
    try:
        import torch

        from ..datasets.nvdec_sessions import NvdecBackend

        backend = NvdecBackend(0)
        t0 = time.perf_counter()
        session = backend.open(os.fspath(path))
        t1 = time.perf_counter()
        backend.frames(session, [0])
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        return {"ms": 1000 * (t2 - t1), "open_ms": 1000 * (t1 - t0)}
    except Exception as e:  # noqa: BLE001  reported, not raised
        return {"error": f"{type(e).__name__}: {e}"}
