"""What every item of a dataset (or of one mixture entry) holds, fixed when the dataset is built: `ItemSpec`
(keys in info order, cameras decoded, window offsets in frames, tolerance, task strings, frame output), and
the selected episodes (`select_episodes`). The user's arguments are checked here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..checks import check_number, episode_list
from ..format.depth import DepthCoding, check_unit
from ..format.errors import DatasetFormatError, EpisodeIndexError
from ..format.metadata import DatasetMetadata
from ..order.eval_split import SIDES, EvalSplit, split_episodes
from ..tabular import UNKNOWN_TASK, Columns, UnknownTasks, delta_offsets
from ..tabular.resample import Resampling, episode_bounds, episode_lengths, resample_columns
from ..tabular.values import unknown_task_rows
from ..video.output import FrameOutput, check_image_size

__all__ = ["ItemSpec", "listed_episodes", "select_episodes"]


@dataclass(frozen=True)
class ItemSpec:
    """What every item of a dataset holds: its keys (info order), the cameras decoded, the window offsets
    (frames) per key, the timestamp tolerance and the task strings. Built once from the metadata and the
    user's arguments (which are checked here); immutable, but for `unknown_tasks`: the dataset's record of rows
    whose task_index the tasks table lacks (`tabular.UnknownTasks`: warns once, or refuses them with
    ``on_unknown_task="raise"``), handed to `load_columns` wherever its rows are read.

    String features (`text_keys`, shape [1]) come out as LeRobot's do: a `str` per item, a list of `str` per
    batch. They cannot be windowed (LeRobot cannot stack strings either) nor have another shape.

    `gpu_keys` (set with `dataclasses.replace` by a dataset built with ``decode_device="cuda"``): the item keys
    whose frames `gather` leaves to the GPU (`gpu_frames`), as references to where they are.

    `depth` (a depth camera's `format.depth.DepthCoding`, by camera key) and `depth_unit`: depth cameras come out
    as float32 distances in that unit ("mm" or "m"), whatever the frame dtype. A camera episodic cannot read (a
    depth map stored as images, a camera of 2 or 4 channels) is refused here, naming it."""

    data_keys: tuple[str, ...]
    video_keys: tuple[str, ...]
    image_keys: tuple[str, ...]
    offsets: Mapping[str, np.ndarray]
    tolerance_s: float
    tasks: np.ndarray  # object array of task strings, plus UNKNOWN_TASK ("") for a task the tasks table lacks
    frames: FrameOutput = field(default_factory=FrameOutput)  # camera frames' size and resize mode
    text_keys: tuple[str, ...] = ()  # data keys of string features
    unknown_tasks: UnknownTasks | None = field(default=None, compare=False, repr=False)
    gpu_keys: tuple[str, ...] = ()  # item keys whose frames are decoded on the GPU (`gather` writes references)
    resampling: Resampling | None = None  # rows resampled to one control rate (`tabular.resample`)
    depth: Mapping[str, DepthCoding] = field(default_factory=dict)  # depth cameras' codings, by key
    depth_unit: str = "mm"  # the unit depth cameras' items are in
    _bounds: dict = field(default_factory=dict, compare=False, repr=False)  # episode_bounds of a metadata, once

    @classmethod
    def build(
        cls,
        meta: DatasetMetadata,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = 1e-4,
        video_keys: Sequence[str] | None = None,
        image_size: Sequence[int] | None = None,
        resize_mode: str = "stretch",
        columns: Sequence[str] | None = None,
        on_unknown_task: str = "warn",
        resampling: Resampling | None = None,
        depth_output_unit: str = "mm",
    ) -> ItemSpec:
        """`columns`: the tabular features items hold (default all of them; a mixture's entry reads only
        those it maps). `resampling`: rows at its fps (`tabular.resample`; its rules checked against the
        features), windows on its grid. `depth_output_unit`: depth cameras' items in "mm" (default) or "m"."""
        info = meta.info
        check_unit(depth_output_unit)
        if resampling is not None:
            resampling.check(info.features, str(meta.root))
        unknown_tasks = UnknownTasks(meta.root, len(meta.tasks), on_unknown_task)  # checks the option
        check_number("tolerance_s", tolerance_s, 0, 1e9)
        if video_keys is None:
            videos = list(info.video_keys)
        else:
            unknown = [k for k in video_keys if k not in info.video_keys]
            if unknown:
                raise ValueError(
                    f"{meta.root}: video_keys {unknown} are not cameras of this dataset (cameras: {info.video_keys})"
                )
            videos = [k for k in info.video_keys if k in video_keys]
        # info order, like LeRobot's hf_dataset columns
        data_keys = [k for k in info.tabular_keys if columns is None or k in columns]
        for key in [*videos, *(k for k in data_keys if info.features[k].is_camera)]:
            problem = info.features[key].camera_problem(info.camera_hw(key)[2])
            if problem:
                raise DatasetFormatError(f"{meta.root}: meta/info.json: {problem}")
        grid = resampling.fps if resampling is not None else info.fps
        offsets = delta_offsets(delta_timestamps, grid, tolerance_s, known_keys=list(info.features))
        # windows of cameras left out by `video_keys` are dropped with the cameras
        offsets = {k: v for k, v in offsets.items() if k in data_keys or k in videos}
        text = [k for k in data_keys if info.features[k].dtype == "string"]
        for key in text:
            if info.features[key].shape != (1,):
                raise DatasetFormatError(
                    f"{meta.root}: meta/info.json: string feature {key!r} has shape "
                    f"{list(info.features[key].shape)}; only shape [1] (one string per frame) "
                    f"can be read"
                )
        windowed = [k for k in text if k in offsets]
        if windowed:
            raise ValueError(
                f"{meta.root}: delta_timestamps for string feature(s) {windowed}: windows are for "
                f"numeric features and cameras (LeRobot cannot stack strings either); leave them out"
            )
        return cls(
            data_keys=tuple(data_keys),
            video_keys=tuple(videos),
            image_keys=tuple(k for k in info.image_keys if k in data_keys),
            offsets=offsets,
            tolerance_s=float(tolerance_s),
            tasks=np.asarray(meta.tasks + [UNKNOWN_TASK], dtype=object),
            frames=FrameOutput(size=check_image_size(image_size, resize_mode), resize_mode=resize_mode),
            text_keys=tuple(text),
            unknown_tasks=unknown_tasks,
            resampling=resampling,
            depth_unit=depth_output_unit,
            depth={k: info.features[k].depth_coding for k in videos if info.features[k].is_depth},
        )

    @property
    def target_fps(self) -> int | None:
        """The fps rows are resampled to (None: each dataset's own)."""
        return None if self.resampling is None else self.resampling.fps

    def episode_lengths(self, meta: DatasetMetadata) -> np.ndarray:
        """Each episode's frames as items count them (resampled when the spec resamples)."""
        return episode_lengths(meta, self.target_fps)

    def resample(self, columns: Columns, meta: DatasetMetadata) -> Columns:
        """`columns` of `meta`'s episodes as items read them: resampled by the spec's `resampling` (unchanged
        without one). Every place that reads rows passes them through here."""
        if self.resampling is None:
            return columns
        held = self._bounds.get("table")
        if held is None or held[0] is not meta.episodes:  # the table held, so its id is never another's
            held = self._bounds["table"] = (meta.episodes, episode_bounds(meta, self.target_fps)[0])
        return resample_columns(columns, meta.fps, self.resampling, held[1][columns.episodes])

    @property
    def camera_keys(self) -> list[str]:
        return [*self.video_keys, *self.image_keys]

    @property
    def depth_keys(self) -> list[str]:
        """The depth cameras among `camera_keys`."""
        return [k for k in self.camera_keys if k in self.depth]

    def frame_output(self, key: str, dtype) -> FrameOutput:
        """How camera `key`'s frames come out in a batch of frame dtype `dtype`: the spec's size and resize mode;
        a depth camera's distances (float32, `depth_unit`), else `dtype`."""
        coding = self.depth.get(key)
        if coding is not None:
            return replace(self.frames, dtype="float32", depth=coding, depth_unit=self.depth_unit)
        return replace(self.frames, dtype=np.dtype(dtype).name)

    def tasks_at(self, task_index: np.ndarray) -> list[str]:
        """The task text of each `task_index` value: UNKNOWN_TASK ("") for one the tasks table lacks."""
        t = np.asarray(task_index)
        n = len(self.tasks) - 1
        return self.tasks[np.where(unknown_task_rows(t, n), n, t)].tolist()

    @property
    def delta_indices(self) -> dict[str, list[int]]:
        """LeRobot's `delta_indices`: window offsets in frames per key."""
        return {k: v.tolist() for k, v in self.offsets.items()}


def select_episodes(
    meta: DatasetMetadata, episodes: Sequence[int] | None, eval_split: EvalSplit | None = None, split: str = "train"
) -> np.ndarray:
    """Selected episodes in ascending order (LeRobot's order, whatever order the list was given in); with an
    `eval_split`, those of side `split` ("train" or "eval") of it (`order.eval_split.split_episodes`: the list
    order as given decides LeRobot's rule). ValueError when the side has no episode."""
    listed = listed_episodes(meta, episodes)
    if split not in SIDES:
        raise ValueError(f"split must be one of {', '.join(SIDES)}, got {split!r}")
    if eval_split is None:
        if split == "eval":
            raise ValueError(f"{meta.root}: split='eval' needs an eval_split (which episodes are held out)")
        return np.sort(listed)
    train, held = split_episodes(eval_split, listed, meta.episodes.first_tasks(listed))
    side = train if split == "train" else held
    if not len(side):
        raise ValueError(
            f"{meta.root}: eval_split {eval_split.to_dict()} leaves no {split} episode of the "
            f"{len(listed)} selected ({len(train)} train, {len(held)} held out)"
        )
    return side


def listed_episodes(meta: DatasetMetadata, episodes: Sequence[int] | None) -> np.ndarray:
    """The episodes as listed (repeats dropped, first occurrence kept), every one checked to be in the dataset;
    all of them ascending when `episodes` is None."""
    n = len(meta.episodes)
    if episodes is None:
        return np.arange(n, dtype=np.int64)
    sel = episode_list(episodes)  # TypeError for 1.7, '1', True: never a silently different episode
    bad = sel[(sel < 0) | (sel >= n)]
    if len(bad):
        raise EpisodeIndexError(
            f"{meta.root}: episode(s) {bad.tolist()[:10]} out of range: the dataset has {n} episodes (0..{n - 1})"
        )
    _, first = np.unique(sel, return_index=True)
    return sel[np.sort(first)]
