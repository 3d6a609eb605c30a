"""tabular/values.py: a data column against its feature (dtype without loss, shape, ragged lists, missing
values) and the bookkeeping rows against the metadata."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from episodic.format import DatasetFormatError
from episodic.format.errors import ProblemList
from episodic.format.features import Feature
from episodic.tabular.values import check_rows, column_values


def F(dtype: str, shape) -> Feature:
    return Feature(name="x", dtype=dtype, shape=tuple(shape))


def test_vectors_and_matrices():
    flat = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 6)
    assert column_values(flat, F("float32", [6]), "w").shape == (2, 6)
    assert column_values(flat, F("float32", [2, 3]), "w").shape == (2, 2, 3)  # flat lists of a matrix
    nested = pa.array([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [1, 2, 3]]], pa.list_(pa.list_(pa.int64())))
    assert column_values(nested, F("int64", [2, 3]), "w")[1, 0].tolist() == [7, 8, 9]
    with pytest.raises(DatasetFormatError, match=r"holds lists of 2x3 values per row, info\.json says shape \[3, 2\]"):
        column_values(nested, F("int64", [3, 2]), "w")
    assert column_values(pa.array([1.5, 2.5]), F("float32", [1]), "w").dtype == np.float32
    with pytest.raises(DatasetFormatError, match=r"holds a scalar per row, info\.json says shape \[3\]"):
        column_values(pa.array([1.5, 2.5]), F("float32", [3]), "w")


def test_ragged_and_missing():
    with pytest.raises(DatasetFormatError, match=r"^w: ragged lists: row 2 has 1 values, other rows 2"):
        column_values(pa.array([[1.0, 2.0], [3.0, 4.0], [5.0]]), F("float32", [2]), "w")
    with pytest.raises(DatasetFormatError, match="1 missing values"):
        column_values(pa.array([[1.0, None], [3.0, 4.0]]), F("float32", [2]), "w")
    with pytest.raises(DatasetFormatError, match="1 missing values"):
        column_values(pa.array([1, None]), F("int64", [1]), "w")
    empty = column_values(pa.array([], pa.list_(pa.float32())), F("float32", [4]), "w")
    assert empty.shape == (0, 4)


def test_dtypes_convert_without_loss():
    assert column_values(pa.array([1.0, 2.0]), F("int64", [1]), "w").tolist() == [1, 2]
    with pytest.raises(DatasetFormatError, match=r"holds 2\.5 at row 1, info\.json says int64"):
        column_values(pa.array([1.0, 2.5]), F("int64", [1]), "w")
    with pytest.raises(DatasetFormatError, match=r"holds nan"):
        column_values(pa.array([np.nan]), F("int64", [1]), "w")
    with pytest.raises(DatasetFormatError, match=r"values 0\.\.300 do not fit int8"):
        column_values(pa.array([0, 300]), F("int8", [1]), "w")
    with pytest.raises(DatasetFormatError, match=r"is string, info\.json says float32"):
        column_values(pa.array(["1.0"]), F("float32", [1]), "w")
    assert column_values(pa.array([0, 1]), F("bool", [1]), "w").tolist() == [False, True]
    with pytest.raises(DatasetFormatError, match="other than 0/1"):
        column_values(pa.array([0, 2]), F("bool", [1]), "w")
    assert column_values(pa.array(["a", "b"]), F("string", [1]), "w").tolist() == ["a", "b"]
    assert column_values(pa.chunked_array([[1, 2], [3]]), F("int64", [1]), "w").tolist() == [1, 2, 3]


def test_check_rows():
    eps, frame = np.array([4, 4, 5]), np.array([0, 1, 0])
    first = np.array([10, 10, 12])
    good = {
        "index": np.array([10, 11, 12]),
        "timestamp": np.array([0, 1 / 30, 0], np.float32),
        "task_index": np.array([0, 0, 1]),
        "frame_index": np.array([0, 1, 0]),
    }
    problems = ProblemList(strict=False)
    check_rows("f", eps, frame, first, good, 2, problems, fps=30)
    assert problems.items == []
    bad = {
        **good,
        "index": np.array([10, 12, 12]),
        "timestamp": np.array([0, np.nan, 0.5], np.float32),
        "task_index": np.array([0, 2, -1]),
        "frame_index": np.array([0, 1, 1]),
    }
    check_rows("f", eps, frame, first, bad, 2, problems, fps=30)
    text = "\n".join(problems.items)
    assert "f: episode 4: column 'index' at frame 1 is 12, expected 11" in text
    assert "column 'timestamp' at frame 1 is nan, not a finite time" in text
    assert "column 'task_index' at frame 1 is 2: the tasks table has 2 task(s), 0..1 (and 1 more rows)" in text
    assert "f: episode 5: column 'frame_index' at frame 0 is 1" in text
    assert "f: episode 5: column 'timestamp' at frame 0 is 0.5, expected 0.000000" in text
    with pytest.raises(DatasetFormatError, match="'index'"):
        check_rows("f", eps, frame, first, bad, 2, ProblemList())
