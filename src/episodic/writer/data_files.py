"""The data parquet files: arrow types and columns from feature descriptions (LeRobot's layout: scalars as
values, vectors and arrays as fixed-size lists, the Hugging Face `datasets` schema in the file metadata), one
episode's segment file, and segments joined into a data file (one row group per episode)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..format.features import Feature
from ..storage.atomic import atomic_path

COMPRESSION = "snappy"


def arrow_type(f: Feature) -> pa.DataType:
    if f.dtype == "string":
        return pa.string()
    base = pa.from_numpy_dtype(np.dtype(f.dtype))
    if f.shape == (1,):
        return base
    t = base
    for n in reversed(f.shape):
        t = pa.list_(t, n)
    return t


def _hf_type(f: Feature) -> dict:
    value = {"dtype": f.dtype, "_type": "Value"}
    if f.shape == (1,):
        return value
    t: dict = value
    for n in reversed(f.shape):
        t = {"feature": t, "length": n, "_type": "List"}
    return t


def data_schema(features: Mapping[str, Feature], keys: Sequence[str]) -> pa.Schema:
    """The schema of a data file holding columns `keys`."""
    hf = json.dumps({"info": {"features": {k: _hf_type(features[k]) for k in keys}}})
    return pa.schema([pa.field(k, arrow_type(features[k])) for k in keys], metadata={"huggingface": hf})


def column(values: np.ndarray, f: Feature) -> pa.Array:
    """One column of a data file from an array with one row per frame."""
    typ = arrow_type(f)
    if f.dtype == "string":
        return pa.array([str(v) for v in values], typ)
    arr = np.ascontiguousarray(values, dtype=np.dtype(f.dtype))
    if f.shape == (1,):
        return pa.array(arr.reshape(-1), typ)
    flat = pa.array(arr.reshape(-1))
    for n in reversed(f.shape):
        flat = pa.FixedSizeListArray.from_arrays(flat, n)
    return flat


def episode_table(columns: Mapping[str, np.ndarray], features: Mapping[str, Feature], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([column(columns[k], features[k]) for k in schema.names], schema=schema)


def write_parquet(
    path: str,
    schema: pa.Schema,
    tables: Iterable[pa.Table],
    row_group_per_table: bool = True,
    fsync: bool = False,
    page_index: bool = False,
) -> int:
    """Write `tables` as one parquet file at `path` (temporary name, then renamed; flushed to the disk first
    with `fsync`), each table one row group unless `row_group_per_table` is False; returns the number of rows.
    Every page has a CRC32 checksum; `page_index` also writes the page index (each page's offset and value
    range, for readers that read pages, not whole row groups). On any error nothing is left at `path`, no
    temporary file, and no open descriptor holds its space."""
    rows = 0
    with atomic_path(path, fsync=fsync) as tmp:
        sink = pa.OSFile(tmp, "wb")
        try:
            # page checksums (CRC32, read back by the loader): damaged bytes inside a page are an error, not wrong rows
            writer = pq.ParquetWriter(
                sink, schema, compression=COMPRESSION, write_page_checksum=True, write_page_index=page_index
            )
            try:
                for table in tables:
                    writer.write_table(table, row_group_size=max(table.num_rows, 1) if row_group_per_table else None)
                    rows += table.num_rows
            except BaseException:
                _quietly(writer.close)
                raise
            writer.close()
        except BaseException:
            _quietly(sink.close)
            raise
        sink.close()
    return rows


def _quietly(close) -> None:
    try:
        close()
    except Exception:  # noqa: BLE001  after a failure: the first error is the one to report
        pass


def write_segment(table: pa.Table, path: str, fsync: bool = False) -> int:
    """One episode's rows as a parquet file of one row group; returns the row group's size in bytes (what it
    adds to a data file; the segment's own footer is not copied)."""
    write_parquet(path, table.schema, [table], fsync=fsync)
    with pa.OSFile(path, "rb") as f:
        rg = pq.read_metadata(f).row_group(0)
    return sum(rg.column(i).total_compressed_size for i in range(rg.num_columns))


def concat_parquet(segments: Sequence[str], final: str, schema: pa.Schema, fsync: bool = False) -> int:
    """Join episode segments into one data file, one row group per episode (LeRobot's layout); returns the
    number of rows. The segments are left as they are."""
    return write_parquet(final, schema, (_read(p, schema) for p in segments), fsync=fsync)


def _read(path: str, schema: pa.Schema) -> pa.Table:
    with pa.OSFile(path, "rb") as f:  # closed here, not when a garbage collection finds the reader
        return pq.read_table(f, schema=schema)
