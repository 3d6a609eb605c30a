"""Camera frames of a batch: decoded straight into their rows of it, one forward pass per video file.

`EntryFrames` is what decoding one dataset's (or one mixture entry's) cameras needs: its `ItemSpec` (cameras,
tolerance, output size), its metadata (each episode's file and time in it), its `Source` (where files are),
decoders and counters. It turns the times of a batch's rows into `FrameJob`s (one per camera file) and decodes
image features (PNG/JPEG bytes in the data file). `run_jobs` runs the jobs of a whole batch together: each file
in one forward pass, the files side by side on the process's decode threads (PyAV decodes and numpy copies
without the GIL). Every frame's size is checked against info.json; errors name episode, camera and file.

With a camera decoded on the GPU (``decode_device="cuda"``), a job's output is the batch's `FrameRefs`: the job
locates its frames exactly as for decoding and writes where they are (file, frame index, pts) into the batch
instead of pixels; `gpu_frames.GpuFrames` decodes them in the main process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from .. import runtime
from ..counters import Counters
from ..format.errors import DatasetFormatError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.source import Source
from ..video import DecoderCache
from ..video.image import decode_image_into
from ..video.output import FrameOutput
from .item_spec import ItemSpec

__all__ = ["FILES_KEY", "EntryFrames", "FrameJob", "FrameRefs", "camera_files", "flat_frames", "run_jobs"]

FILES_KEY = "episodic.frame_files"  # a batch's video files (local paths) its frame references point into


class EntryFrames:
    """Decoding the cameras of one dataset (or mixture entry) `spec` describes, from the files of `meta` under
    `source`, through `decoders`; decode seconds go to `counters`."""

    def __init__(
        self,
        spec: ItemSpec,
        meta: DatasetMetadata,
        source: Source,
        decoders: DecoderCache | None = None,
        counters: Counters | None = None,
    ):
        self.spec, self.meta, self.source = spec, meta, source
        self.decoders = decoders if decoders is not None else DecoderCache(counters=counters)
        self.counters = counters if counters is not None else self.decoders.counters
        self._hw: dict[str, tuple[int, int]] = {}
        self._outputs: dict[tuple, FrameOutput] = {}
        self._shapes: dict[str, tuple[int, int, int]] = {}

    def hw(self, key: str) -> tuple[int, int]:
        """info.json's (height, width) of camera `key`, read once."""
        hw = self._hw.get(key)
        if hw is None:
            h, w, _ = self.meta.info.camera_hw(key)
            hw = self._hw[key] = (h, w)
        return hw

    def output(self, dtype, key: str) -> FrameOutput:
        """Camera `key`'s frame output in a batch of frame dtype `dtype` (uint8 or float32: a name or a numpy
        dtype; `ItemSpec.frame_output`: a depth camera's distances are float32 whatever it is)."""
        out = self._outputs.get((dtype, key))
        if out is None:
            out = self._outputs[(dtype, key)] = self.spec.frame_output(key, dtype)
        return out

    def frame_shape(self, key: str) -> tuple[int, int, int]:
        """(C, H, W) of camera `key`'s frames at the spec's output size (C: 1 for a depth camera, else 3)."""
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self.output("float32", key).shape(self.hw(key))
        return shape

    def check_size(self, key: str, hw: Sequence[int], where: str, episodes: np.ndarray) -> None:
        """A camera's frames must have info.json's size (a file of another size is an error, never frames of
        the file's size under the dataset's name)."""
        want = self.hw(key)
        if tuple(hw) != want:
            bad = sorted(set(np.asarray(episodes).tolist()))
            raise DatasetFormatError(
                f"{self.meta.root}: {where}: camera {key!r} (episode {bad[0] if len(bad) == 1 else bad[:10]}): "
                f"frames are {hw[0]}x{hw[1]} (height x width) but info.json says {want[0]}x{want[1]}"
            )

    def jobs(
        self,
        key: str,
        eps: np.ndarray,
        times: np.ndarray,
        dest: np.ndarray,
        target: np.ndarray,
        output: FrameOutput | FrameRefs,
    ) -> list[FrameJob]:
        """The jobs that decode camera `key`'s frames at `times` ((B, T) seconds inside each row's episode, rows of
        episodes `eps` (B,)) into rows `target` ((B, T)) of `dest` ((N * T, *frame shape)), or locate them into
        `dest`'s frame references when `output` is the batch's `FrameRefs`: one per video file the episodes are
        in."""
        cam = self.meta.episodes.cameras[key]
        query = cam.from_ts[eps][:, None] + times  # seconds inside each episode's file
        fids = cam.file_id[eps]
        if not len(fids):
            return []
        if len(fids) == 1 or (fids == fids[0]).all():
            return [
                FrameJob(self, key, cam.files[int(fids[0])], eps, query.reshape(-1), dest, target.reshape(-1), output)
            ]
        return [
            FrameJob(self, key, cam.files[fid], eps[sel], query[sel].reshape(-1), dest, target[sel].reshape(-1), output)
            for fid in np.unique(fids).tolist()
            for sel in [np.flatnonzero(fids == fid)]
        ]

    def locate_episode(self, key: str, episode: int, times: np.ndarray) -> tuple[str, np.ndarray, np.ndarray | None]:
        """(file, times in it, frame index of each) for rows of one episode at `times` (seconds inside it); the
        frames are None when some time has no frame within tolerance (then they are located when decoded, and
        the error names the rows asked for)."""
        rel = self.meta.video_file_of(episode, key)
        in_file = self.meta.episodes.cameras[key].from_ts[episode] + times
        reader = FrameJob(self, key, rel, np.asarray([episode]), in_file, None, None, None).reader()
        try:
            return rel, in_file, reader.locate(in_file, self.spec.tolerance_s)
        except FrameTimestampError:
            return rel, in_file, None

    def images(
        self, key: str, store: Sequence, rows: np.ndarray, dest: np.ndarray, output: FrameOutput, episodes: np.ndarray
    ) -> None:
        """Decode the images (encoded bytes `store[r]`) of rows `rows` (episodes `episodes`, same shape) into
        `dest` ((*rows.shape, *frame shape))."""
        want = self.hw(key)
        flat = dest.reshape(-1, *dest.shape[-3:])
        eps = np.broadcast_to(episodes, rows.shape).reshape(-1)
        for i, r in enumerate(rows.reshape(-1).tolist()):
            hw = decode_image_into(store[r], flat[i], output, f"{self.meta.root}: row {r} feature {key!r}")
            if hw != tuple(want):
                self.check_size(key, hw, "an image in the data file", eps[i : i + 1])


def camera_files(meta: DatasetMetadata, keys: Sequence[str], episodes: np.ndarray) -> list[tuple[int, int, int]]:
    """(height, width, files) of each video camera `keys`: how many video files `episodes` span (what
    `video.decoder_cache.default_cache_size` sizes a decoder cache by)."""
    return [(*meta.info.camera_hw(k)[:2], len(np.unique(meta.episodes.cameras[k].file_id[episodes]))) for k in keys]


def flat_frames(frames: np.ndarray, frame_dims: int = 3) -> np.ndarray:
    """(N, [T,] *frame) frames as (N * T, *frame) rows (`frame_dims`: the axes of one frame, or of one frame
    reference): a view, never a copy that writes would be lost in."""
    flat = frames.reshape(-1, *frames.shape[-frame_dims:])
    if flat.size and not np.may_share_memory(flat, frames):  # (numpy 2.5 deprecates setting .shape, which raised)
        raise ValueError(
            f"frames of shape {frames.shape} and strides {frames.strides} cannot be written through one flat view"
        )
    return flat


class FrameRefs:
    """A batch's references to frames decoded later on the GPU: its video files (local paths, numbered in the
    order first met) and, written by each job into its rows of an int64 (N * T, 3) array, (file number, frame
    index in the file, the frame's pts). Jobs run on several threads: numbering is locked."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self._numbers: dict[str, int] = {}
        self._lock = threading.Lock()

    def put(self, reader, frames: np.ndarray, dest: np.ndarray, slots: np.ndarray) -> None:
        with self._lock:
            no = self._numbers.get(reader.path)
            if no is None:
                no = self._numbers[reader.path] = len(self.files)
                self.files.append(reader.path)
        dest[slots, 0] = no
        dest[slots, 1] = frames
        dest[slots, 2] = reader.index.pts[frames]


class FrameJob(NamedTuple):
    """One camera file's frames of a batch: the frames at `times` (seconds in the file) of rows of `episodes`,
    written into rows `slots` of `dest` ((N * T, *frame shape)), or located only when `output` is the batch's
    `FrameRefs` (`dest`: (N * T, 3) references). `frames`: the frame indices of `times` when already located,
    else None (located when run). `episodes`, `slots` and `frames` are arrays, or lists of ints (a mixture's
    batch: one frame of each of many files)."""

    entry: EntryFrames
    key: str
    rel: str
    episodes: np.ndarray
    times: np.ndarray | None
    dest: np.ndarray | None
    slots: np.ndarray | None
    output: FrameOutput | FrameRefs | None
    frames: np.ndarray | None = None

    def reader(self, reader=None):
        """The file's reader from its entry's decoder cache (or `reader`, taken from it already), its frame size
        checked against info.json."""
        entry = self.entry
        if reader is None:
            try:
                reader = entry.decoders.get(entry.source.local_path(self.rel))
            except (FrameTimestampError, VideoDecodeError) as e:
                raise self._named(e) from None
        if reader.shape != entry.hw(self.key):
            entry.check_size(self.key, reader.shape, self.rel, self.episodes)
        return reader

    def run(self, reader=None) -> None:
        reader = reader or self.reader()
        assert self.dest is not None and self.slots is not None, "a job that runs has a destination"
        try:
            frames = self.frames if self.frames is not None else reader.locate(self.times, self.entry.spec.tolerance_s)
            if isinstance(self.output, FrameRefs):
                self.output.put(reader, frames, self.dest, self.slots)
            else:
                reader.decode_into(frames, self.dest, self.output, self.slots)
        except (FrameTimestampError, VideoDecodeError) as e:
            raise self._named(e) from None

    def _named(self, e: Exception) -> Exception:
        """`e` naming the episode(s) and camera as well as the file."""
        bad = sorted(set(np.asarray(self.episodes).reshape(-1).tolist()))
        return type(e)(f"episode {bad[0] if len(bad) == 1 else bad}, camera {self.key!r}: {e}")


class _DecodePool:
    """This process's decode threads, started when first used. Stopped and joined before the process forks (a
    DataLoader worker starting), after the decoding under way ends (`runtime.stop_threads_at_fork`): no thread of
    ours is alive at a fork; the next decode starts them again."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.threads = 0
        self.lock = threading.Lock()  # held while a map runs, and from before a fork until after it
        runtime.after_fork(self)
        runtime.stop_threads_at_fork(self)

    def _before_fork(self) -> None:
        self.lock.acquire()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def _after_fork_parent(self) -> None:
        self.lock.release()

    def _after_fork(self) -> None:  # in the child: no pool (stopped before the fork), a lock of its own
        self.pool, self.lock = None, threading.Lock()

    def each(self, fn: Callable, items: Sequence) -> None:
        """`fn(item)` for every item at once: the first on the calling thread (which would otherwise only wait),
        the others on this pool's `len(items) - 1` threads. Returns when all have ended; raises the first error."""
        n = len(items) - 1
        if n < 1:  # nothing for the pool (which cannot have 0 threads)
            for item in items:
                fn(item)
            return
        with self.lock:
            if self.pool is None or self.threads != n:
                if self.pool is not None:
                    self.pool.shutdown(wait=False)
                self.pool, self.threads = ThreadPoolExecutor(max_workers=n, thread_name_prefix="episodic-decode"), n
            futures = [self.pool.submit(fn, item) for item in items[1:]]
            try:
                fn(items[0])
            finally:
                for f in futures:  # every job ends before the batch it writes into is returned or dropped
                    f.exception()
            for f in futures:
                f.result()


_POOL = _DecodePool()


def _run_each(pairs: list) -> None:
    for job, reader in pairs:
        job.run(reader)


def _readers(jobs: Sequence[FrameJob]) -> list | None:
    """Each job's reader (`FrameJob.reader`), taken from each decoder cache in one call; None when a file is in two
    jobs or a cache cannot hold all of its jobs' files at once. A file that fails to open is named with its job's
    episodes."""
    asked: dict[int, tuple[DecoderCache, list[int], list[str]]] = {}  # id(cache) -> (cache, jobs, their files)
    for i, j in enumerate(jobs):
        entry = j.entry
        got = asked.get(id(entry.decoders))
        if got is None:
            got = asked[id(entry.decoders)] = (entry.decoders, [], [])
        got[1].append(i)
        got[2].append(entry.source.local_path(j.rel))
    if any(len(paths) > d.max_open or len(set(paths)) < len(paths) for d, _, paths in asked.values()):
        return None
    readers: list = [None] * len(jobs)
    for decoders, positions, paths in asked.values():
        try:
            got_readers = decoders.get_many(paths)
        except (FrameTimestampError, VideoDecodeError):
            return [j.reader() for j in jobs]  # again one by one: the failing job's error names its episodes
        for i, r in zip(positions, got_readers):
            readers[i] = jobs[i].reader(r)
    return readers


def run_jobs(jobs: Sequence[FrameJob], threads: int | None = None) -> None:
    """Run a batch's frame jobs, timed as the first job's entry's ``decode_seconds``: each file's frames in one
    forward pass. When every job has its own file and all of them fit in their decoder caches at once, the
    readers are taken first (in this thread: a cache is not thread-safe), then the jobs run, on `threads` decode
    threads (default: the process's, `runtime.decode_threads`) when there are threads to spare; else one job
    after the other."""
    if not jobs:
        return
    with jobs[0].entry.counters.timer("decode_seconds"):
        readers = _readers(jobs)  # here, in one thread: the cache is not thread-safe
        if readers is None:
            for j in jobs:
                j.run()
            return
        threads = threads or runtime.decode_threads()
        if threads > 1 and len(jobs) > 1:  # PyAV decodes and numpy copies without the GIL
            # one task per thread (jobs dealt round-robin), not one per job: a mixture's batch is ~64 one-frame
            # jobs, each shorter than handing it to a thread
            n = min(threads, len(jobs))
            _POOL.each(_run_each, [list(zip(jobs[i::n], readers[i::n])) for i in range(n)])
        else:
            for j, r in zip(jobs, readers):
                j.run(r)
