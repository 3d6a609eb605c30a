"""The shared core of every dataset mode: batches of items for row positions of a selection of episodes.

`ItemSpec` is what an item holds, fixed when a dataset is built (keys, window offsets, tolerance, tasks,
cameras); `FrameEngine` applies a spec to the rows it is given (`Columns`) and decodes their frames. Map-style
builds one engine over all its selected rows; streaming builds one per chunk over the pooled episodes' rows.
Window arithmetic (tabular/windows.py) and the frame <-> time mapping (video/) are used from here only.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from .. import runtime
from ..checks import check_number, episode_list
from ..counters import Counters
from ..format.errors import DatasetFormatError, EpisodeIndexError, FrameTimestampError, VideoDecodeError
from ..format.metadata import DatasetMetadata
from ..storage.source import Source
from ..tabular import UNKNOWN_TASK, Columns, UnknownTasks, delta_offsets, window_rows
from ..tabular.values import unknown_task_rows
from ..video import DecoderCache
from ..video.image import decode_image_into
from ..video.output import FrameOutput
from .memory import Empty, place


@dataclass(frozen=True)
class ItemSpec:
    """What every item of a dataset holds: its keys (info order), the cameras decoded, the window offsets
    (frames) per key, the timestamp tolerance and the task strings. Built once from the metadata and the
    user's arguments (which are checked here); immutable, but for `unknown_tasks`: the dataset's record of rows
    whose task_index the tasks table lacks (`tabular.UnknownTasks`: warns once, or refuses them with
    ``on_unknown_task="raise"``), handed to `load_columns` wherever its rows are read.

    String features (`text_keys`, shape [1]) come out as LeRobot's do: a `str` per item, a list of `str` per
    batch. They cannot be windowed (LeRobot cannot stack strings either) nor have another shape."""

    data_keys: tuple[str, ...]
    video_keys: tuple[str, ...]
    image_keys: tuple[str, ...]
    offsets: Mapping[str, np.ndarray]
    tolerance_s: float
    tasks: np.ndarray  # object array of task strings, plus UNKNOWN_TASK ("") for a task the tasks table lacks
    frames: FrameOutput = field(default_factory=FrameOutput)  # camera frames' size and resize mode
    text_keys: tuple[str, ...] = ()  # data keys of string features
    unknown_tasks: UnknownTasks | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(cls, meta: DatasetMetadata, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
              tolerance_s: float = 1e-4, video_keys: Sequence[str] | None = None,
              image_size: Sequence[int] | None = None, resize_mode: str = "stretch",
              columns: Sequence[str] | None = None, on_unknown_task: str = "warn") -> "ItemSpec":
        """`columns`: the tabular features items hold (default all of them; a mixture's entry reads only
        those it maps)."""
        info = meta.info
        unknown_tasks = UnknownTasks(meta.root, len(meta.tasks), on_unknown_task)  # checks the option
        check_number("tolerance_s", tolerance_s, 0, 1e9)
        if video_keys is None:
            videos = list(info.video_keys)
        else:
            unknown = [k for k in video_keys if k not in info.video_keys]
            if unknown:
                raise ValueError(f"{meta.root}: video_keys {unknown} are not cameras of this dataset (cameras: {info.video_keys})")
            videos = [k for k in info.video_keys if k in video_keys]
        # info order, like LeRobot's hf_dataset columns
        data_keys = [k for k in info.tabular_keys if columns is None or k in columns]
        offsets = delta_offsets(delta_timestamps, info.fps, tolerance_s, known_keys=list(info.features))
        # windows of cameras left out by `video_keys` are dropped with the cameras
        offsets = {k: v for k, v in offsets.items() if k in data_keys or k in videos}
        text = [k for k in data_keys if info.features[k].dtype == "string"]
        for key in text:
            if info.features[key].shape != (1,):
                raise DatasetFormatError(f"{meta.root}: meta/info.json: string feature {key!r} has shape "
                                         f"{list(info.features[key].shape)}; only shape [1] (one string per frame) "
                                         f"can be read")
        windowed = [k for k in text if k in offsets]
        if windowed:
            raise ValueError(f"{meta.root}: delta_timestamps for string feature(s) {windowed}: windows are for "
                             f"numeric features and cameras (LeRobot cannot stack strings either); leave them out")
        return cls(data_keys=tuple(data_keys), video_keys=tuple(videos),
                   image_keys=tuple(k for k in info.image_keys if k in data_keys), offsets=offsets,
                   tolerance_s=float(tolerance_s), tasks=np.asarray(meta.tasks + [UNKNOWN_TASK], dtype=object),
                   frames=FrameOutput(size=image_size, resize_mode=resize_mode), text_keys=tuple(text),
                   unknown_tasks=unknown_tasks)

    @property
    def camera_keys(self) -> list[str]:
        return [*self.video_keys, *self.image_keys]

    def tasks_at(self, task_index: np.ndarray) -> list[str]:
        """The task text of each `task_index` value: UNKNOWN_TASK ("") for one the tasks table lacks."""
        t = np.asarray(task_index)
        n = len(self.tasks) - 1
        return self.tasks[np.where(unknown_task_rows(t, n), n, t)].tolist()

    @property
    def delta_indices(self) -> dict[str, list[int]]:
        """LeRobot's `delta_indices`: window offsets in frames per key."""
        return {k: v.tolist() for k, v in self.offsets.items()}


def select_episodes(meta: DatasetMetadata, episodes: Sequence[int] | None) -> np.ndarray:
    """Selected episodes in ascending order (LeRobot's order, whatever order the list was given in)."""
    n = len(meta.episodes)
    if episodes is None:
        return np.arange(n, dtype=np.int64)
    sel = episode_list(episodes)  # TypeError for 1.7, '1', True: never a silently different episode
    bad = sel[(sel < 0) | (sel >= n)]
    if len(bad):
        raise EpisodeIndexError(f"{meta.root}: episode(s) {bad.tolist()[:10]} out of range: the dataset has {n} episodes (0..{n - 1})")
    return np.unique(sel)


class _DecodePool:
    """This process's decode threads, started when first used. Stopped and joined before the process forks (a
    DataLoader worker starting), after the decoding under way ends (`runtime.stop_threads_at_fork`): no thread of
    ours is alive at a fork; the next decode starts them again."""

    def __init__(self):
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

    def map(self, n: int, fn: Callable, *iterables) -> list:
        """`fn` over `iterables` on `n` threads; the results in order."""
        with self.lock:
            if self.pool is None or self.threads != n:
                if self.pool is not None:
                    self.pool.shutdown(wait=False)
                self.pool, self.threads = ThreadPoolExecutor(max_workers=n, thread_name_prefix="episodic-decode"), n
            return list(self.pool.map(fn, *iterables))


_POOL = _DecodePool()


class FrameEngine:
    """Items of an `ItemSpec` for the rows of `columns` (episodes side by side), frames decoded through
    `decoders` from the files `source` holds. Counts decode and item-building seconds in `counters`."""

    def __init__(self, spec: ItemSpec, meta: DatasetMetadata, source: Source, columns: Columns,
                 decoders: DecoderCache | None = None, counters: Counters | None = None,
                 decode_threads: int | None = None):
        self.spec, self.meta, self.source, self.columns = spec, meta, source, columns
        self.decoders = decoders if decoders is not None else DecoderCache(counters=counters)
        self.counters = counters if counters is not None else self.decoders.counters
        self.decode_threads = decode_threads  # None: runtime.decode_threads() of the process that decodes

    @property
    def episodes(self) -> np.ndarray:
        return self.columns.episodes

    def __len__(self) -> int:
        return len(self.columns)

    # ------------------------------------------------------------------ items
    def batch(self, positions: Sequence[int] | np.ndarray, dtype: str = "uint8", place: Callable = place) -> dict:
        """Items for row positions, batched: tensors with a leading batch axis in the memory this process
        hands batches out from (`memory.place`, or the `place` given: a mixture's entries build parts of a
        batch in scratch memory), cameras (B, [T,] C, H, W) of `dtype` ("uint8", or "float32" in [0, 1]) at
        the spec's `frames` size, pad masks (B, T) bool, and 'task' and string features lists of `str`."""
        rows = np.asarray(positions).reshape(-1)
        if rows.dtype.kind not in "iu" and len(rows):  # a float (1.7) or bool position is never a silent row 1
            raise TypeError(f"positions must be integers, got {rows.dtype} values {rows[:5].tolist()}")
        rows = rows.astype(np.int64, copy=False)
        n = len(self)
        if len(rows) and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"index {int(rows[(rows < -n) | (rows >= n)][0])} out of range for {n} frames")
        rows = np.where(rows < 0, rows + n, rows)
        cols = self.columns
        ep_pos = cols.episode_of_rows(rows)
        start, end = cols.starts[ep_pos], cols.starts[ep_pos + 1]
        spec = self.spec
        output = self._output(dtype)
        windows = {k: window_rows(rows, start, end, off) for k, off in spec.offsets.items()}
        arrays: dict = {}
        ts = cols.arrays["timestamp"]
        times = {k: ts[windows[k][0] if k in windows else rows[:, None]].astype(np.float64) for k in spec.video_keys}
        for key in spec.video_keys:
            shape = output.shape(self._hw(key))
            arrays[key] = Empty((*times[key].shape, *shape) if key in windows else (len(rows), *shape), np.dtype(dtype))
        queries = {}
        for key in spec.data_keys:
            q = windows[key][0] if key in windows else rows
            if key in spec.image_keys:
                shape = output.shape(self._hw(key))
                arrays[key], queries[key] = Empty((*q.shape, *shape), np.dtype(dtype)), q
            else:
                arrays[key] = cols.arrays[key][q]
        for key, (_, pad) in windows.items():
            arrays[f"{key}_is_pad"] = pad
        if spec.text_keys:  # strings are no tensors: lists of str, in their place among the keys
            placed = place({k: v for k, v in arrays.items() if k not in spec.text_keys})
            out = {k: arrays[k].tolist() if k in spec.text_keys else placed[k] for k in arrays}
        else:
            out = place(arrays)
        if spec.video_keys or queries:
            with self.counters.timer("decode_seconds"):
                if spec.video_keys:
                    self._decode(ep_pos, times, {k: out[k].numpy() for k in spec.video_keys}, output)
                for key, q in queries.items():
                    self._images(key, q, out[key].numpy(), output)
        out["task"] = spec.tasks_at(cols.arrays["task_index"][rows])
        return out

    def _decode(self, ep_pos: np.ndarray, times: Mapping[str, np.ndarray], dest: Mapping[str, np.ndarray],
                output: FrameOutput) -> None:
        """Decode frames at times (B, T) inside each row's episode into `dest[camera]` ((B, [T,] *frame shape)).
        One job per (camera, file), each one forward pass that writes its slots of the output; jobs run on
        `decode_threads` threads (PyAV decodes and numpy copies without the GIL), so a process with cores to
        spare decodes its cameras side by side."""
        eps = self.episodes[ep_pos]
        rows = np.arange(len(eps))[:, None]
        jobs: list[FrameJob] = []
        for key, t in times.items():
            per_row = t.shape[1]
            jobs += self._camera_jobs(key, eps, t, self._dest_rows(dest, key), rows * per_row + np.arange(per_row),
                                      output)
        _run(jobs, self.decode_threads)

    # ------------------------------------------------------------------ parts of a larger batch (mixtures)
    def part(self, positions: Sequence[int] | np.ndarray, dest: Mapping[str, np.ndarray],
             slots: np.ndarray) -> tuple[dict, list[FrameJob]]:
        """Items for row `positions` as a part of a larger batch (a mixture's entry), with the values of
        `batch(positions)`: the tabular ones returned as numpy arrays (data keys, windows' ``<key>_is_pad``,
        'task' a list), the cameras written straight into the larger batch: ``dest[camera]`` ((N, [T,]
        *frame shape) at the spec's output size, uint8 or float32: the dtype of the frames) at its rows `slots`
        (B,). Video frames are decoded by the returned jobs (`run_jobs`, for the jobs of every part at once);
        image features are decoded here."""
        rows = np.asarray(positions, dtype=np.int64).reshape(-1)
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        n = len(self)
        if len(rows) != len(slots):
            raise ValueError(f"{len(rows)} positions but {len(slots)} batch rows")
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"index {int(rows[(rows < 0) | (rows >= n)][0])} out of range for {n} frames")
        cols, spec = self.columns, self.spec
        ep_pos = cols.episode_of_rows(rows)
        start, end = cols.starts[ep_pos], cols.starts[ep_pos + 1]
        windows = {k: window_rows(rows, start, end, off) for k, off in spec.offsets.items()}
        values: dict = {}
        for key in spec.data_keys:
            q = windows[key][0] if key in windows else rows
            if key in spec.image_keys:
                frames = self._dest_rows(dest, key)
                tmp = np.empty((*q.shape, *frames.shape[-3:]), frames.dtype)
                self._images(key, q, tmp, self._output(frames.dtype))
                dest[key][slots] = tmp
            else:
                values[key] = cols.arrays[key][q]
        for key, (_, pad) in windows.items():
            values[f"{key}_is_pad"] = pad
        values["task"] = spec.tasks_at(cols.arrays["task_index"][rows])
        jobs: list[FrameJob] = []
        if spec.video_keys and len(rows):
            eps = self.episodes[ep_pos]
            ts = cols.arrays["timestamp"]
            row_times = None  # the rows' own times: the same for every camera without a window
            for key in spec.video_keys:
                frames = self._dest_rows(dest, key)
                w = windows.get(key)
                if w is not None:
                    times = ts[w[0]].astype(np.float64)  # (B, T)
                    per_row = times.shape[1]
                    target = slots[:, None] * per_row + np.arange(per_row)  # rows of the flat (N * T) frames
                else:
                    if row_times is None:
                        row_times = ts[rows].astype(np.float64)[:, None]
                    times, target = row_times, slots
                jobs += self._camera_jobs(key, eps, times, frames, target, self._output(frames.dtype))
        return values, jobs

    def _camera_jobs(self, key: str, eps: np.ndarray, times: np.ndarray, dest: np.ndarray, target: np.ndarray,
                     output: FrameOutput) -> list[FrameJob]:
        """The jobs that decode camera `key`'s frames at `times` ((B, T) seconds inside each row's episode, rows of
        episodes `eps` (B,)) into rows `target` ((B, T) or (B,) when T is 1) of `dest` ((N * T, *frame shape)):
        one per video file the episodes are in."""
        cam = self.meta.episodes.cameras[key]
        query = cam.from_ts[eps][:, None] + times  # seconds inside each episode's file
        fids = cam.file_id[eps]
        if not len(fids):
            return []
        if len(fids) == 1 or (fids == fids[0]).all():
            return [FrameJob(self, key, cam.files[int(fids[0])], eps, query.reshape(-1), dest, target.reshape(-1),
                             output)]
        jobs = []
        for fid in np.unique(fids).tolist():
            sel = np.flatnonzero(fids == fid)
            jobs.append(FrameJob(self, key, cam.files[fid], eps[sel], query[sel].reshape(-1), dest,
                                 target[sel].reshape(-1), output))
        return jobs

    def _dest_rows(self, dest: Mapping[str, np.ndarray], key: str) -> np.ndarray:
        """`dest[key]` as (N * T, *frame) rows (a view: never a copy that writes would be lost in), checked
        against the spec's frame shape."""
        arr = dest[key]
        self.check_frame_shape(key, arr.shape[-3:])
        return flat_frames(arr)

    def check_frame_shape(self, key: str, shape: Sequence[int]) -> None:
        """Camera `key`'s frames at the spec's output size must have `shape`, the batch's (C, H, W)."""
        want = tuple(self.spec.frames.shape(self._hw(key)))
        if tuple(shape) != want:
            raise DatasetFormatError(f"{self.meta.root}: camera {key!r} gives frames of shape {want}, the batch "
                                     f"holds {tuple(shape)}")

    def _hw(self, key: str) -> tuple[int, int]:
        """info.json's (height, width) of camera `key`, read once per engine."""
        sizes = self.__dict__.setdefault("_camera_hw", {})
        hw = sizes.get(key)
        if hw is None:
            hw = sizes[key] = tuple(self.meta.info.camera_hw(key)[:2])
        return hw

    def _output(self, dtype: np.dtype) -> FrameOutput:
        """The spec's frame output in `dtype` (uint8 or float32)."""
        cache = self.__dict__.setdefault("_outputs", {})
        out = cache.get(dtype)
        if out is None:
            out = cache[dtype] = replace(self.spec.frames, dtype=np.dtype(dtype).name)
        return out

    def _check_size(self, key: str, hw: tuple[int, int], where: str, episodes: np.ndarray) -> None:
        """A camera's frames must have info.json's size (a file of another size is an error, never frames of
        the file's size under the dataset's name)."""
        want = self._hw(key)
        if tuple(hw) != want:
            bad = sorted(set(np.asarray(episodes).tolist()))
            raise DatasetFormatError(f"{self.meta.root}: {where}: camera {key!r} (episode {bad[0] if len(bad) == 1 else bad[:10]}): "
                                     f"frames are {hw[0]}x{hw[1]} (height x width) but info.json says {want[0]}x{want[1]}")

    def _images(self, key: str, q: np.ndarray, dest: np.ndarray, output: FrameOutput) -> None:
        """Decode the images (PNG/JPEG bytes in the data file) of rows `q` into `dest` ((*q.shape, *frame shape))."""
        store = self.columns.images[key]
        want = self._hw(key)
        flat = dest.reshape(-1, *dest.shape[-3:])
        for i, r in enumerate(q.reshape(-1).tolist()):
            where = f"{self.meta.root}: row {r} feature {key!r}"
            hw = decode_image_into(store[r], flat[i], output, where)
            if hw != tuple(want):
                self._check_size(key, hw, f"row {r} (an image in the data file)",
                                 self.episodes[self.columns.episode_of_rows(np.array([r]))])


def flat_frames(frames: np.ndarray) -> np.ndarray:
    """(N, [T,] *frame) frames as (N * T, *frame) rows: a view, never a copy that writes would be lost in."""
    flat = frames.reshape(-1, *frames.shape[-3:])
    if flat.size and not np.may_share_memory(flat, frames):  # (numpy 2.5 deprecates setting .shape, which raised)
        raise ValueError(f"frames of shape {frames.shape} and strides {frames.strides} cannot be written through "
                         f"one flat view")
    return flat


class FrameJob(NamedTuple):
    """One camera file's frames of a part of a batch (`FrameEngine.part`): the frames at `times` (seconds in
    the file) of rows of `episodes`, written into rows `slots` of `dest` ((N * T, *frame shape)). `frames`: the
    frame indices of `times` when already located (`mixture_pool`), else None (located when run)."""

    engine: FrameEngine
    key: str
    rel: str
    episodes: np.ndarray
    times: np.ndarray
    dest: np.ndarray
    slots: np.ndarray
    output: FrameOutput
    frames: np.ndarray | None = None

    def reader(self):
        """The file's reader from its engine's decoder cache, its frame size checked against info.json."""
        engine = self.engine
        try:
            reader = engine.decoders.get(engine.source.local_path(self.rel))
        except (FrameTimestampError, VideoDecodeError) as e:
            raise self._named(e) from None
        engine._check_size(self.key, reader.shape, self.rel, self.episodes)
        return reader

    def run(self, reader=None) -> None:
        reader = reader or self.reader()
        try:
            frames = self.frames if self.frames is not None else reader.locate(self.times, self.engine.spec.tolerance_s)
            reader.decode_into(frames, self.dest, self.output, self.slots)
        except (FrameTimestampError, VideoDecodeError) as e:
            raise self._named(e) from None

    def _named(self, e: Exception) -> Exception:
        """`e` naming the episode(s) and camera as well as the file (as `FrameEngine.batch`'s errors do)."""
        bad = sorted(set(self.episodes.tolist()))
        return type(e)(f"episode {bad[0] if len(bad) == 1 else bad}, camera {self.key!r}: {e}")


def run_jobs(jobs: Sequence[FrameJob], threads: int | None = None) -> None:
    """Run the frame jobs of a batch's parts (`FrameEngine.part`): each file's frames in one forward pass. When
    every job has its own file and all of them fit in their decoder cache at once, the readers are taken first
    (in this thread: the cache is not thread-safe), then the jobs run, on `threads` decode threads (default: the
    process's, `runtime.decode_threads`) when there are threads to spare; else one job after the other."""
    if jobs:
        with jobs[0].engine.counters.timer("decode_seconds"):
            _run(jobs, threads)


def _run(jobs: Sequence[FrameJob], threads: int | None) -> None:
    """`run_jobs` without the timer (`FrameEngine.batch` times its decoding as a whole)."""
    counts: dict[int, list] = {}
    files = set()
    for j in jobs:
        decoders = j.engine.decoders
        counts.setdefault(id(decoders), [decoders, 0])[1] += 1
        files.add((id(decoders), j.rel, j.engine.source.root))
    if len(files) < len(jobs) or any(n > d.max_open for d, n in counts.values()):
        for j in jobs:
            j.run()
        return
    readers = [j.reader() for j in jobs]  # here, in one thread: the cache is not thread-safe
    threads = threads or runtime.decode_threads()
    if threads > 1 and len(jobs) > 1:  # PyAV decodes and numpy copies without the GIL
        _POOL.map(threads, FrameJob.run, jobs, readers)
    else:
        for j, r in zip(jobs, readers):
            j.run(r)
