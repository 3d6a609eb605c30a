"""Which version of a file is there (storage/versions.py): remote version tokens, local identities."""

import os

import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.storage.versions import file_identity, version_token


def test_version_token():
    a = version_token({"size": 10, "ETag": '"abc"', "type": "file", "name": "x"})
    assert a == version_token({"size": 10, "ETag": '"abc"', "mimetype": "video/mp4"})
    assert a != version_token({"size": 10, "ETag": '"abd"'}) != version_token({"size": 11, "ETag": '"abc"'})
    assert version_token({"size": 10, "Last-Modified": "Mon"}) != version_token({"size": 10, "Last-Modified": "Tue"})
    assert version_token({"size": 10}) == "size=10"


def test_local_file_identity_is_its_size_and_modification_time(tmp_path):
    path = tmp_path / "data.parquet"
    path.write_bytes(b"12345")
    os.utime(path, ns=(1_000_000_000, 2_000_000_123))
    fs = LocalFileSystem()
    assert file_identity(fs, str(path)) == [5, 2_000_000_123]
    path.write_bytes(b"12345")  # same size, rewritten: another modification time
    os.utime(path, ns=(1_000_000_000, 3_000_000_456))
    assert file_identity(fs, str(path)) == [5, 3_000_000_456]
    with pytest.raises(FileNotFoundError):
        file_identity(fs, str(tmp_path / "missing.parquet"))
