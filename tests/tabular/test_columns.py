"""Rows of some episodes read from data files of any row-group layout (tabular/columns.py): only the row groups
holding them are read (one per episode as LeRobot writes, several episodes per row group as `episodic repack`
may write, or row groups that do not follow episodes at all), and the rows equal pyarrow's own read of the file."""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.demo import write_demo_dataset
from episodic.format.metadata import load_metadata
from episodic.tabular.columns import load_columns


class CountingFile(io.FileIO):
    """A local file that records which of its bytes are read (`touched`: a byte mask per path)."""

    touched: dict[str, np.ndarray] = {}

    def _note(self, start: int, n: int) -> None:
        mask = CountingFile.touched.setdefault(self.name, np.zeros(os.path.getsize(self.name), bool))
        mask[start : start + n] = True

    def read(self, size=-1):
        start = self.tell()
        data = super().read(size)
        self._note(start, len(data))
        return data

    def readinto(self, b):
        start = self.tell()
        n = super().readinto(b)
        self._note(start, n or 0)
        return n


def _rewrite(root, row_groups) -> str:
    """The dataset's one data file rewritten with row groups of `row_groups(lengths)` rows each."""
    meta = load_metadata(LocalFileSystem(), str(root))
    (rel,) = meta.episodes.data_files
    path = root / rel
    table = pq.read_table(path)
    sizes = row_groups(meta.episodes.length)
    with pq.ParquetWriter(path, table.schema) as w:
        start = 0
        for n in sizes:
            w.write_table(table.slice(start, n), row_group_size=n)
            start += n
    assert pq.ParquetFile(path).metadata.num_row_groups == len(sizes)
    return str(path)


@pytest.fixture(scope="module")
def tabular_root(tmp_path_factory):
    """30 episodes of 100-140 frames, no camera: one data file of about 650 kB (well past the 64 kB pyarrow reads
    at the end of a file for its footer)."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("tabular") / "ds",
        num_episodes=30,
        min_length=100,
        max_length=140,
        cameras=(),
        progress=False,
    )


@pytest.mark.parametrize("layout", ["two episodes each", "97 rows each", "one for all"])
def test_only_the_row_groups_holding_the_episodes_are_read(tabular_root, tmp_path, layout):
    root = tmp_path / "ds"
    shutil.copytree(tabular_root, root)
    rules = {
        "two episodes each": lambda lengths: [int(a + b) for a, b in zip(lengths[::2], lengths[1::2])],
        "97 rows each": lambda lengths: [97] * (int(lengths.sum()) // 97) + [int(lengths.sum()) % 97],
        "one for all": lambda lengths: [int(lengths.sum())],
    }
    path = _rewrite(root, rules[layout])
    meta = load_metadata(LocalFileSystem(), str(root))
    names = ["observation.state", "action", "index"]
    whole = pq.read_table(path)
    for wanted in ([1], [0, 3], [5], [2, 3, 4], [29]):
        CountingFile.touched.clear()
        cols = load_columns(meta, np.asarray(wanted), names, open_file=lambda p: CountingFile(p, "rb"))
        rows = np.isin(whole.column("episode_index").to_numpy(), wanted)
        for n in names:
            want = np.asarray(whole.column(n).to_pylist(), dtype=cols.arrays[n].dtype)[rows]
            assert np.array_equal(cols.arrays[n].reshape(len(want), -1), want.reshape(len(want), -1)), n
        read = CountingFile.touched[path].mean()  # the part of the file read
        if layout != "one for all":
            assert read < 0.25  # the row groups of those episodes, and the footer
        if layout == "one for all":
            assert read > 0.9
