"""`DatasetMetadata.has_language_columns`, which LeRobot 0.6's training script reads to pick its collate function:
False for a dataset episodic reads; LeRobot 0.6's language features (dtype "language") are not read yet, and a
dataset declaring one is refused with an error naming the file and the feature (never loaded without them)."""

from __future__ import annotations

import json

import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.format import DatasetFormatError
from episodic.format.metadata import LANGUAGE_COLUMNS, load_metadata


def test_no_language_columns(small_root):
    meta = load_metadata(LocalFileSystem(), str(small_root))
    assert meta.has_language_columns is False
    assert not set(LANGUAGE_COLUMNS) & set(meta.features)


@pytest.mark.parametrize("key", ["language_persistent", "language_events"])
def test_a_language_feature_is_refused_by_name(small_root, copy_of, key):
    root = copy_of(small_root)
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"][key] = {"dtype": "language", "shape": [1], "names": None}  # as LeRobot 0.6.1 declares it
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetFormatError, match=rf"info\.json: feature '{key}': field 'dtype' 'language'"):
        load_metadata(LocalFileSystem(), str(root))
