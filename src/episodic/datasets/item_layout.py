"""The keys of a dataset's items, in order: for each, where its values come from in each entry, its dtype and
shape, and what an entry that lacks it gives. One table for every kind of dataset (`gather` builds batches from
it): a single dataset's is the identity (its own keys, one entry); a mixture's is its shared layout.

A `Field` is one item key of a kind:

- ``frames``: camera frames (a video or an image feature of the entry), (C, H, W) ((T, C, H, W) with a window);
  zeros for an entry without the camera.
- ``depth``: a depth camera's distances (`format.depth`), float32 (1, H, W) ((T, 1, H, W) with a window) in the
  spec's depth unit, whatever the frame dtype; zeros for an entry without the camera.
- ``values``: a numeric column (with a window: its rows at the window's offsets); with a `dtype` and `shape`,
  the entry's index selection of the last axis, cast and zero-padded to that shape; without (a single
  dataset), the column as stored.
- ``text``: a string column, a list of `str` per batch.
- ``task``: the task text: the episode's task (source ``"task"``), a text column, or "" (no source).
- ``pad``: ``<base>_is_pad`` (bool): the steps of `base`'s window outside the episode; True where the entry lacks
  `base`'s source; False for a field without a window.
- ``mask``: ``<base>_mask`` (bool, `base`'s last axis): True on the entry's own dimensions.
- ``entry``: the entry's ``dataset_index`` (int64); ``name``: its name (a list of `str`).

Adding a key is adding its `Field` to the table of `single_layout` or `mixture_layout` (a new kind of value,
once, to `gather`). The mixture's item keys are described in `mixture.layout` and docs/mixtures.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..format.features import Feature
from ..mixture.layout import ACTION, STATE, MixtureLayout
from .item_spec import ItemSpec

__all__ = ["FRAME_KINDS", "Field", "ItemLayout", "single_layout", "mixture_layout", "KINDS"]

KINDS = ("frames", "depth", "values", "text", "task", "pad", "mask", "entry", "name")
TEXT_KINDS = ("text", "task", "name")  # lists of str, not tensors
FRAME_KINDS = ("frames", "depth")  # camera keys: decoded from videos or images


@dataclass(frozen=True)
class Field:
    """One item key (see the module docstring). `sources[e]`: entry e's dataset key (None: the entry lacks it);
    `select[e]`: entry e's index selection of the last axis (``values``); `base`: the field a ``pad`` or
    ``mask`` describes; `dtype`/`shape`: per item, after the window axis (None: the column's own)."""

    key: str
    kind: str
    sources: tuple[str | None, ...] = ()
    window: int | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    select: tuple[tuple[int, ...] | None, ...] = ()
    base: str | None = None
    dims: tuple[int, ...] = ()  # ``values`` with a shape: each entry's own size of the last axis


@dataclass(frozen=True)
class ItemLayout:
    """The fields of every item, in item key order, and each entry's ``dataset_index`` and name (a mixture's)."""

    fields: tuple[Field, ...]
    entry_index: tuple[int, ...] = (0,)
    entry_name: tuple[str, ...] = ("",)

    def field(self, key: str) -> Field:
        return self._by_key[key]

    def base_of(self, f: Field) -> Field:
        """The field a ``pad`` or ``mask`` field `f` describes."""
        assert f.base is not None, f"field {f.key!r} describes no other field"
        return self._by_key[f.base]

    @cached_property
    def _by_key(self) -> dict[str, Field]:
        return {f.key: f for f in self.fields}

    @cached_property
    def merge_keys(self) -> tuple[tuple, ...]:
        """Per entry, what its items' values take from the entry besides its rows: each field's source, index
        selection and own size. Entries with equal keys (and equal windows and cameras) are gathered as one part
        (`gather.merge_entries`)."""
        return tuple(
            tuple(
                (
                    f.sources[e] if f.sources else None,
                    f.select[e] if f.select else None,
                    f.dims[e] if f.dims else None,
                )
                for f in self.fields
            )
            for e in range(len(self.entry_index))
        )

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.fields]

    @property
    def camera_keys(self) -> list[str]:
        """Every camera key, depth cameras included (LeRobot's ``camera_keys``)."""
        return [f.key for f in self.fields if f.kind in FRAME_KINDS]

    @property
    def depth_keys(self) -> list[str]:
        return [f.key for f in self.fields if f.kind == "depth"]


def single_layout(spec: ItemSpec, features: dict[str, Feature]) -> ItemLayout:
    """A single dataset's items: its cameras (videos first, then each image feature in its place among the
    columns), its columns in info order, a ``<key>_is_pad`` per window, and the task -- LeRobot's item."""

    def frames(key: str) -> Field:
        return Field(key, "depth" if key in spec.depth else "frames", (key,), window=_steps(spec, key))

    fields = [frames(k) for k in spec.video_keys]
    for key in spec.data_keys:
        if key in spec.image_keys:
            fields.append(frames(key))
        else:
            fields.append(Field(key, "text" if key in spec.text_keys else "values", (key,), window=_steps(spec, key)))
    fields += [Field(f"{key}_is_pad", "pad", (key,), base=key) for key in spec.offsets]
    fields.append(Field("task", "task", ("task",)))
    return ItemLayout(tuple(fields))


def _steps(spec: ItemSpec, key: str) -> int | None:
    off = spec.offsets.get(key)
    return None if off is None else len(off)


def mixture_layout(layout: MixtureLayout) -> ItemLayout:
    """A mixture's items (`mixture.layout`): each camera role with ``_is_pad``; state and action in float32 at
    the mixture's dimension with ``_mask`` (and ``_is_pad`` with a window); the frame's bookkeeping values; the
    entry's ``dataset_index``; task text and ``dataset_name``."""
    entries = layout.entries
    fields: list[Field] = []
    h_w = layout.image_size
    for role, key in zip(layout.cameras, layout.camera_keys):
        assert h_w is not None, "a mixture with cameras has an image size"
        depth = role in layout.depth_roles
        fields.append(
            Field(
                key,
                "depth" if depth else "frames",
                tuple(e.cameras.get(role) for e in entries),
                window=layout.windows.get(role),
                shape=(1 if depth else 3, *h_w),
            )
        )
        fields.append(Field(f"{key}_is_pad", "pad", fields[-1].sources, base=key))
    for role, key, dim in (("state", STATE, layout.state_dim), ("action", ACTION, layout.action_dim)):
        if not dim:
            continue
        sources = tuple(e.state_key if role == "state" else e.action_key for e in entries)
        select = tuple(e.state_indices if role == "state" else e.action_indices for e in entries)
        dims = tuple(e.state_dim if role == "state" else e.action_dim for e in entries)
        window = layout.windows.get(role)
        fields.append(
            Field(key, "values", sources, window=window, dtype="float32", shape=(dim,), select=select, dims=dims)
        )
        fields.append(Field(f"{key}_mask", "mask", sources, base=key))
        if window is not None:
            fields.append(Field(f"{key}_is_pad", "pad", sources, base=key))
    fields.append(Field("timestamp", "values", ("timestamp",) * len(entries), dtype="float32", shape=()))
    for key in ("frame_index", "episode_index", "index"):
        fields.append(Field(key, "values", (key,) * len(entries), dtype="int64", shape=()))
    fields.append(Field("dataset_index", "entry"))
    fields.append(Field("task", "task", tuple(e.task_key for e in entries)))
    fields.append(Field("dataset_name", "name"))
    return ItemLayout(tuple(fields), tuple(e.index for e in entries), tuple(e.name for e in entries))


_FIXED = "features() describes a layout of fixed shapes (a mixture's)"


def features(layout: ItemLayout) -> dict[str, dict]:
    """LeRobot-style feature descriptions (dtype, shape, names) of a layout's keys with a fixed dtype and shape
    (a mixture's: cameras, state/action and their masks, bookkeeping, text)."""
    out: dict[str, dict] = {}
    for f in layout.fields:
        if f.kind in FRAME_KINDS:
            assert f.shape is not None, _FIXED
            c, h, w = f.shape
            out[f.key] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"]}
            if f.kind == "depth":
                out[f.key]["info"] = {"is_depth_map": True}
        elif f.kind == "values":
            assert f.shape is not None, _FIXED
            out[f.key] = {"dtype": f.dtype, "shape": list(f.shape) or [1], "names": None}
        elif f.kind == "mask":
            base = layout.base_of(f)
            assert base.shape is not None, _FIXED
            out[f.key] = {"dtype": "bool", "shape": list(base.shape), "names": None}
        elif f.kind == "entry":
            out[f.key] = {"dtype": "int64", "shape": [1], "names": None}
        elif f.kind in TEXT_KINDS:
            out[f.key] = {"dtype": "string", "shape": [1], "names": None}
    return out


def item_dtype(f: Field, frames_dtype: str, column: np.ndarray | None) -> np.dtype:
    """The numpy dtype of a (non-text) field's values in a batch with frames of `frames_dtype`."""
    if f.kind == "frames":
        return np.dtype(frames_dtype)
    if f.kind == "depth":
        return np.dtype(np.float32)
    if f.kind in ("pad", "mask"):
        return np.dtype(bool)
    if f.kind == "entry":
        return np.dtype(np.int64)
    if f.dtype is not None:
        return np.dtype(f.dtype)
    assert column is not None, f"field {f.key!r} takes its column's dtype"
    return column.dtype
