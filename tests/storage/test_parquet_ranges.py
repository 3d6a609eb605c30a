"""Parquet footer parsing in the range-read module: the footer length, the tail read (extended to a long
footer) and the byte spans of row groups, on data files written by episodic's writer."""

from __future__ import annotations

import io

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodic.demo import write_demo_dataset
from episodic.storage.ranges import (
    RangeFile,
    open_for_read,
    open_ranged,
    parquet_footer_length,
    read_tail,
    row_group_spans,
)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    root = write_demo_dataset(
        tmp_path_factory.mktemp("pq") / "ds",
        num_episodes=5,
        min_length=10,
        max_length=20,
        height=48,
        width=64,
        progress=False,
    )
    return sorted(root.glob("data/*/*.parquet"))[0]


class _Remote:
    """fetch(start, end) over a file's bytes, recording every request."""

    def __init__(self, data: bytes):
        self.data, self.requests = data, []

    def __call__(self, start: int, end: int) -> bytes:
        self.requests.append((start, end))
        return self.data[start:end]


def test_footer_length_matches_pyarrow(data_file):
    data = data_file.read_bytes()
    md = pq.ParquetFile(data_file).metadata
    assert parquet_footer_length(data[-8:]) == md.serialized_size + 8
    assert parquet_footer_length(b"not a parquet file") is None and parquet_footer_length(b"PAR1") is None


def test_tail_is_extended_to_a_long_footer(data_file):
    data = data_file.read_bytes()
    need = parquet_footer_length(data)
    fetch = _Remote(data)
    start, tail = read_tail(fetch, len(data), first=16)  # far less than the footer: one more request
    assert start == len(data) - need and tail == data[start:] and len(fetch.requests) == 2
    fetch = _Remote(data)
    start, tail = read_tail(fetch, len(data))  # the default first read holds the whole (small) footer
    assert tail == data[start:] and len(data) - start >= need and len(fetch.requests) == 1
    other = bytes(range(200))
    assert read_tail(_Remote(other), len(other), first=50) == (150, other[150:])


def test_row_group_spans_hold_everything_a_row_group_read_needs(data_file):
    data = data_file.read_bytes()
    pf = pq.ParquetFile(data_file)
    assert pf.metadata.num_row_groups == 5  # one per episode
    footer = len(data) - parquet_footer_length(data)
    spans = row_group_spans(pf.metadata, [1, 3])
    assert len(spans) == 2 and all(0 <= s < e <= footer for s, e in spans)
    # the file with every byte outside the spans and the footer zeroed still gives row groups 1 and 3
    kept = bytearray(len(data))
    for s, e in spans + [(footer, len(data))]:
        kept[s:e] = data[s:e]
    doctored = pq.ParquetFile(io.BytesIO(bytes(kept)))
    assert doctored.read_row_groups([1, 3]).equals(pf.read_row_groups([1, 3]))
    with pytest.raises((OSError, pa.ArrowException)):  # and not row group 0: its bytes are gone (a read error)
        doctored.read_row_groups([0])
    # through a RangeFile the spans are fetched in one round of requests, exactly
    fetch = _Remote(data)
    rf = open_ranged(fetch, len(data), (footer, data[footer:]))
    rf.prefetch(spans, merge_gap=0)
    assert fetch.requests == spans


def test_open_for_read_of_a_local_file_is_the_file(data_file):
    with open_for_read(fsspec.filesystem("file"), str(data_file)) as f:
        assert not isinstance(f, RangeFile)
        assert np.array_equal(
            pq.ParquetFile(f).read().column("index").to_numpy(), pq.read_table(data_file).column("index").to_numpy()
        )
