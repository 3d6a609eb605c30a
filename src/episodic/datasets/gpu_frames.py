"""Camera frames decoded on the GPU (``decode_device="cuda"``): the CPU locates, the GPU decodes.

Where a batch is built (`gather`, in a DataLoader worker or the main process) nothing changes but the frames:
each camera key decoded on the GPU (`ItemSpec.gpu_keys`) holds frame references instead of pixels, int64
(N, [T,] 3) = (file number, frame index, pts), located exactly as the CPU path locates frames (episodic's own
frame index, `video.decoder.FrameIndex`: by timestamp within tolerance), and the batch lists its files under
`FILES_KEY` (local paths: remote files were fetched there by the worker). So workers still read the tabular
columns, fetch and index the files; they never touch CUDA (a forked child refuses to). The main process, where
every batch passes, turns the references into frames with `GpuFrames.complete`: each file's frames (sorted,
each once) by one decoder session, the files side by side on at most `decoders` sessions (NVDEC has several
engines: 7 on an H100/H200), written into one CUDA tensor per camera (uint8, or float32 in [0, 1] as the CPU
path converts them: `device.frames_to_float`), resized there when `image_size` asks (bilinear with
antialiasing: within the CPU path's stated tolerance of torchvision, not bit-identical). Decoder sessions are
reused across files (`SessionPool`: a session opened costs ~50-70 ms; reconfigured for the next file).

No silent CPU fallback: at construction every camera's codec, pixel format and size are put to the driver
(`video.nvdec_caps`); one NVDEC cannot decode (AV1 on an A100/H100/H200) is a `GpuDecodeError` naming camera,
codec, GPU and the fix (`episodic reencode`), unless `cpu_fallback` names it (True: any camera): then it is
logged once and decoded on the main process's CPU by PyAV (the CPU path's pixels), its frames counted
(`gpu_fallback_frames`). The decode library is PyNvVideoCodec (`pip install "episodic[gpu]"`), chosen by
measurement on a lent H200 (see docs/gpu.md); `nvdec_sessions.NvdecBackend` is the one class that calls it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import torch

from .. import runtime
from ..counters import Counters
from ..format.errors import GpuDecodeError, VideoDecodeError
from ..video import DecoderCache
from ..video.nvdec_caps import NvdecProbe, gpu_refusal, probe_nvdec
from ..video.output import FrameOutput
from ..video.stream_probe import StreamFacts, probe_stream
from .decode import FILES_KEY
from .device import frames_to_float
from .nvdec_sessions import NvdecBackend, SessionPool

__all__ = ["CameraSource", "GpuFrames", "check_decode_device", "fit_frames", "gpu_setup"]

log = logging.getLogger(__name__)

DEFAULT_DECODERS = 4  # sessions in flight when the driver does not say how many NVDEC engines there are
MAX_DECODERS = 8  # measured on an H200: 8 decoders on threads ~5x one, 16 no more


def check_decode_device(decode_device) -> str | None:
    """None for "cpu" (decode in the workers, the default), else the CUDA device ("cuda", "cuda:1")."""
    if decode_device is None or decode_device == "cpu":
        return None
    if isinstance(decode_device, torch.device):
        decode_device = str(decode_device)
    if not isinstance(decode_device, str) or not (
        decode_device == "cuda" or decode_device.startswith("cuda:") and decode_device[5:].isdigit()
    ):
        raise ValueError(f"decode_device must be 'cpu', 'cuda' or 'cuda:N', got {decode_device!r}")
    return decode_device


@dataclass(frozen=True)
class CameraSource:
    """One camera of a dataset (or mixture entry) as construction checks it: the item `key` it fills, the
    `entry` name ('' for a single dataset), its stream facts and where they were read."""

    key: str
    entry: str
    facts: StreamFacts
    where: str

    @property
    def label(self) -> str:
        return f"camera {self.key!r}" + (f" of entry {self.entry!r}" if self.entry else "") + f" ({self.where})"


def camera_sources(
    meta, keys: Sequence[str], source, episodes: np.ndarray, entry: str = "", rename=lambda k: k
) -> list[CameraSource]:
    """The cameras `keys` of a dataset, each described by its first selected episode's video file when that
    file is local (info.json's ``video.codec``/``video.pix_fmt`` otherwise)."""
    out = []
    for k in keys:
        h, w = meta.info.camera_hw(k)[:2]
        rel = meta.video_file_of(int(episodes[0]), k) if len(episodes) else None
        facts = None
        if rel is not None and source.is_local:
            try:
                facts = probe_stream(source.local_path(rel))
            except VideoDecodeError as e:
                raise GpuDecodeError(f"{meta.root}: camera {k!r}: {e}") from None
        if facts is None:
            info = getattr(meta.info.features[k], "info", None) or {}
            facts = StreamFacts(
                str(info.get("video.codec", "unknown")), str(info.get("video.pix_fmt", "yuv420p")), h, w, 0
            )
        out.append(CameraSource(rename(k), entry, facts, f"{meta.root}/{rel}" if rel else str(meta.root)))
    return out


def fit_frames(frames: torch.Tensor, output: FrameOutput) -> torch.Tensor:
    """(K, 3, h, w) uint8 frames at `output`'s size (stretch or letterbox, zero bars), on their device:
    bilinear with antialiasing, rounded (the CPU path scales with swscale in its colour conversion; the two
    agree within the tolerance `video.output` states)."""
    if output.size is None:
        return frames
    src_hw = (frames.shape[-2], frames.shape[-1])
    h, w, top, left = output.placement(src_hw)
    H, W = output.frame_hw(src_hw)
    if (h, w) == src_hw and (H, W) == src_hw:
        return frames
    scaled = (
        torch.nn.functional.interpolate(
            frames.float(), size=(h, w), mode="bilinear", antialias=True, align_corners=False
        )
        .round_()
        .clamp_(0, 255)
        .to(torch.uint8)
    )
    if (h, w) == (H, W):
        return scaled
    out = torch.zeros((frames.shape[0], 3, H, W), dtype=torch.uint8, device=frames.device)
    out[:, :, top : top + h, left : left + w] = scaled
    return out


class GpuFrames:
    """A dataset's GPU decoding (see the module docstring): built in the main process at construction, which
    checks every camera in `cameras`; `complete(batch)` turns a batch's frame references into frames on
    `device`. `shapes`: each GPU key's frame shape (C, H, W); `output`: the frames' size and resize mode."""

    def __init__(
        self,
        device: str,
        cameras: Sequence[CameraSource],
        shapes: dict,
        output: FrameOutput,
        cpu_fallback=False,
        decoders: int | None = None,
        counters: Counters | None = None,
    ):
        self.device = resolve_device(device)
        self.shapes = {k: tuple(v) for k, v in shapes.items()}
        self.output = replace(output, dtype="uint8", channels_first=True)
        self.counters = counters if counters is not None else Counters()
        allowed = _fallback_keys(cpu_fallback, {c.key for c in cameras})
        gpu_id = self.device.index or 0
        needs = sorted({(c.facts.codec, c.facts.chroma, c.facts.bit_depth) for c in cameras})
        self.probe: NvdecProbe = query_capabilities(needs)
        if self.probe.why is not None:
            raise GpuDecodeError(f"decode_device={device!r}: NVDEC cannot be used here: {self.probe.why}")
        self.gpu_name = self.probe.gpu_name(gpu_id)
        self.fallback: set[str] = set()  # keys decoded on the CPU
        refused = []
        for c in cameras:
            support = self.probe.support(gpu_id, c.facts.codec, c.facts.chroma, c.facts.bit_depth)
            why = gpu_refusal(support, c.facts)
            if why is None:
                continue
            what = (
                f"{c.label}: codec {c.facts.codec} ({c.facts.pix_fmt}, {c.facts.width}x{c.facts.height}) cannot "
                f"be decoded by NVDEC on {self.gpu_name} (GPU {gpu_id}): {why}"
            )
            if c.key in allowed:
                if c.key not in self.fallback:
                    log.warning("%s; decoded on the CPU instead (cpu_fallback)", what)
                self.fallback.add(c.key)
            else:
                refused.append(what)
        if refused:
            raise GpuDecodeError(
                "\n".join(refused) + "\nfix: re-encode the dataset once for NVDEC (`episodic reencode "
                "SRC DST --vcodec h264`), or decode these cameras on the CPU (cpu_fallback=[...]), "
                "or leave decode_device='cpu'"
            )
        engines = [
            s.engines
            for g in self.probe.gpus
            if g.index == gpu_id
            for s in g.codecs.values()
            if s.supported and s.engines
        ]
        self.decoders = int(decoders) if decoders else min(MAX_DECODERS, min(engines) if engines else DEFAULT_DECODERS)
        if self.decoders < 1:
            raise ValueError(f"gpu_decoders must be >= 1, got {decoders!r}")
        gpu_keys = set(self.shapes) - self.fallback
        self.sessions = SessionPool(open_backend(gpu_id), self.decoders) if gpu_keys else None
        self._cpu = DecoderCache(max_open=32, counters=Counters())
        # batches decoded side by side by a loader: enough to give every session a file
        self.prefetch = max(1, self.decoders // max(1, len(self.shapes)))
        # None after a fork, like `sessions` (`complete` refuses to decode there)
        self._threads: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=self.decoders, thread_name_prefix="episodic-gpu"
        )
        self._ahead: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=self.prefetch, thread_name_prefix="episodic-gpu-batch"
        )
        self._cpu_lock = threading.Lock()  # the CPU fallback's decoder cache is not thread-safe
        self._forked = False
        runtime.after_fork(self)

    def _after_fork(self) -> None:  # nothing CUDA here, and nothing of the parent's freed
        runtime.keep_inherited(self.sessions, self._threads, self._ahead)
        self._forked, self.sessions, self._threads, self._ahead = True, None, None, None

    def __reduce__(self):  # to a spawned DataLoader worker: a stand-in that refuses to decode
        return _InWorker, ()

    def complete(self, batch: dict) -> dict:
        """`batch` (collated, from a worker or this process) with each GPU key's frame references replaced by
        frames on the device, and CPU-decoded image keys moved there as uint8 (the caller converts dtype)."""
        if self._forked or runtime.in_worker():
            raise GpuDecodeError(
                "decode_device='cuda' decodes in the main process; a DataLoader worker cannot "
                "(use the dataset's loader(), whose workers prepare batches for the main process)"
            )
        files = batch.pop(FILES_KEY, None)
        if files is None:
            return batch
        t0 = time.perf_counter()
        requests: dict[tuple[bool, str, bytes], np.ndarray] = {}
        plans: dict[str, tuple[torch.Size, np.ndarray]] = {}
        for key in self.shapes:
            refs = batch.get(key)
            if refs is None:
                continue
            flat = refs.reshape(-1, 3).numpy()
            plans[key] = (refs.shape[:-1], flat)
            for no in np.unique(flat[:, 0]).tolist():
                if no >= 0:
                    wanted = np.unique(flat[flat[:, 0] == no, 1])
                    requests.setdefault((key in self.fallback, files[no], wanted.tobytes()), wanted)
        decoded = self._decode(requests)
        for key, (lead, flat) in plans.items():
            out = torch.zeros((len(flat), *self.shapes[key]), dtype=torch.uint8, device=self.device)
            for no in np.unique(flat[:, 0]).tolist():
                if no < 0:
                    continue  # an entry without this camera: zeros
                rows = np.flatnonzero(flat[:, 0] == no)
                wanted = np.unique(flat[rows, 1])
                frames = decoded[(key in self.fallback, files[no], wanted.tobytes())]
                if tuple(frames.shape[1:]) != self.shapes[key]:
                    raise VideoDecodeError(
                        f"{files[no]}: camera {key!r}: frames of shape {tuple(frames.shape[1:])}, "
                        f"the batch holds {self.shapes[key]}"
                    )
                pick = torch.as_tensor(np.searchsorted(wanted, flat[rows, 1]), device=self.device)
                out[torch.as_tensor(rows, device=self.device)] = frames[pick]
            batch[key] = out.reshape(*lead, *self.shapes[key])
        self.counters.add(gpu_decode_seconds=time.perf_counter() - t0)
        return batch

    def _decode(self, requests: dict) -> dict:
        """Each (fallback, path, frames) request's frames (K, 3, H, W) uint8 on the device, files side by side."""
        gpu = [(k, v) for k, v in requests.items() if not k[0]]
        threads = self._threads
        assert threads is not None, "GPU frames are decoded in the process that built them (`complete`)"
        futures = {k: threads.submit(self._gpu_file, k[1], v) for k, v in gpu}
        with self._cpu_lock:  # the cache is not thread-safe
            out = {k: self._cpu_file(k[1], v) for k, v in requests.items() if k[0]}
        for k, f in futures.items():
            out[k] = f.result()
        return out

    def _gpu_file(self, path: str, frames: np.ndarray) -> torch.Tensor:
        sessions = self.sessions
        assert sessions is not None, "a GPU key's file is decoded by the dataset's sessions"
        session = sessions.acquire(path)
        ok = False
        try:
            got = sessions.backend.frames(session, frames.tolist())
            ok = True
        except VideoDecodeError as e:
            raise VideoDecodeError(f"{path}: frames {frames[:8].tolist()}: {e}") from None
        finally:
            if ok:
                sessions.release(path, session)
            else:
                sessions.drop()
        self.counters.add(gpu_frames=len(frames))
        return fit_frames(got.to(self.device), self.output)

    def _cpu_file(self, path: str, frames: np.ndarray) -> torch.Tensor:
        reader = self._cpu.get(path)
        h, w = self.output.frame_hw(reader.shape)
        host = np.empty((len(frames), 3, h, w), np.uint8)
        reader.decode_into(frames, host, self.output)
        self.counters.add(gpu_fallback_frames=len(frames))
        return torch.from_numpy(host).to(self.device, non_blocking=False)

    def finish(self, batch: dict, camera_keys: Sequence[str], return_uint8: bool) -> dict:
        """A collated batch as the user gets it: GPU frames decoded (`complete`), every camera on the device,
        float32 in [0, 1] unless `return_uint8` (converted there, bit-identical to the CPU path)."""
        batch = self.complete(batch)
        for k in camera_keys:
            v = batch.get(k)
            if torch.is_tensor(v):
                v = v.to(self.device, non_blocking=True)
                batch[k] = v if return_uint8 or v.dtype != torch.uint8 else frames_to_float(v)
        return batch

    def ahead(self, batches: Iterator[dict], finish: Callable[[dict], dict]) -> Iterator[dict]:
        """`finish(batch)` of each of `batches`, in order, with up to `self.prefetch` batches decoded ahead on
        threads: one batch holds a file or two per camera, too few to keep every NVDEC engine busy."""
        pending: deque = deque()
        pool = self._ahead
        assert pool is not None, "GPU frames are decoded in the process that built them"
        for batch in batches:
            pending.append(pool.submit(finish, batch))
            if len(pending) > self.prefetch:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def stats(self) -> dict:
        """Decoder sessions opened and reconfigured, the sessions' bound, and the cameras on the CPU."""
        s = self.sessions
        return {
            "device": str(self.device),
            "gpu": self.gpu_name,
            "decoders": self.decoders,
            "sessions_opened": s.opened if s else 0,
            "sessions_reconfigured": s.reopened if s else 0,
            "cpu_fallback": sorted(self.fallback),
        }


class _InWorker:
    """What a dataset's `GpuFrames` is in a spawned DataLoader worker: batches keep their frame references."""

    def complete(self, batch: dict) -> dict:
        raise GpuDecodeError(
            "decode_device='cuda' decodes in the main process; a DataLoader worker cannot (use the "
            "dataset's loader(), whose workers prepare batches for the main process)"
        )

    finish = complete


def _fallback_keys(cpu_fallback, keys: set[str]) -> set[str]:
    if cpu_fallback is True:
        return set(keys)
    if cpu_fallback is False or cpu_fallback is None:
        return set()
    if isinstance(cpu_fallback, str) or not all(isinstance(k, str) for k in cpu_fallback):
        raise ValueError(f"cpu_fallback must be True, False or a list of camera keys, got {cpu_fallback!r}")
    unknown = sorted(set(cpu_fallback) - keys)
    if unknown:
        raise ValueError(f"cpu_fallback names {unknown}, which are not cameras decoded here ({sorted(keys)})")
    return set(cpu_fallback)


# The three places the machine is asked (tests replace them on a machine without a GPU).
def resolve_device(device: str) -> torch.device:
    """The CUDA device, or GpuDecodeError saying why torch cannot use it."""
    if not torch.cuda.is_available():
        raise GpuDecodeError(
            f"decode_device={device!r}, but torch sees no CUDA GPU (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda}); run on a GPU machine or leave decode_device='cpu'"
        )
    dev = torch.device(device)
    if (dev.index or 0) >= torch.cuda.device_count():
        raise GpuDecodeError(f"decode_device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


def query_capabilities(needs) -> NvdecProbe:
    """The driver's answer for each (codec, chroma, bit depth) in `needs` (`video.nvdec_caps.probe_nvdec`)."""
    return probe_nvdec(tuple(needs))


def open_backend(gpu_id: int):
    """The decode library's backend for GPU `gpu_id`."""
    return NvdecBackend(gpu_id)


def gpu_setup(
    layout,
    entries: Sequence,
    decode_device,
    cpu_fallback=False,
    decoders: int | None = None,
    output: FrameOutput | None = None,
    counters: Counters | None = None,
):
    """(gpu_keys, GpuFrames) of a dataset or mixture built with `decode_device` ((), None for the CPU).

    `layout`: its `item_layout.ItemLayout`; `entries[e]`: (metadata, item spec, source, selected episodes) of
    layout entry e. The GPU keys are the camera keys whose sources are videos (an image feature in a GPU key
    of a mixture is refused: it could not be decoded with the key's videos)."""
    device = check_decode_device(decode_device)
    if device is None:
        if cpu_fallback not in (False, None) or decoders is not None:
            raise ValueError("cpu_fallback and gpu_decoders apply to decode_device='cuda'")
        return (), None
    keys, cameras, shapes = [], [], {}
    for f in layout.fields:
        if f.kind != "frames":
            continue
        kinds = {
            ("video" if src in spec.video_keys else "image")
            for (meta, spec, _, _), src in zip(entries, f.sources)
            if src is not None
        }
        if kinds == {"image"}:
            continue  # image features: decoded from the data files by the workers, moved to the device after
        if kinds != {"video"}:
            raise ValueError(
                f"decode_device={decode_device!r}: key {f.key!r} is a video in some entries and an image "
                f"feature in others; such a mixture decodes on the CPU only"
            )
        keys.append(f.key)
        for e, ((meta, spec, source, episodes), src) in enumerate(zip(entries, f.sources)):
            if src is None:
                continue
            cameras += camera_sources(meta, [src], source, episodes, layout.entry_name[e], lambda k, key=f.key: key)
            if f.key not in shapes:
                shapes[f.key] = (
                    tuple(f.shape) if f.shape is not None else spec.frames.shape(meta.info.camera_hw(src)[:2])
                )
    if not keys:
        return (), None
    return tuple(keys), GpuFrames(device, cameras, shapes, output or FrameOutput(), cpu_fallback, decoders, counters)
