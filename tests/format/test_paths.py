"""format/paths.py: the one check that keeps paths from dataset content inside the root and the cache."""

from __future__ import annotations

import os

import pytest
from fsspec.implementations.local import LocalFileSystem

from episodic.format import DatasetFormatError
from episodic.format.errors import UnsafePathError
from episodic.format.paths import (
    DATA_FIELDS,
    VIDEO_FIELDS,
    cache_name,
    check_repo_id,
    dataset_path,
    inside,
    relative_problem,
    render,
    render_many,
    template_problems,
)


@pytest.mark.parametrize(
    "rel", ["data/chunk-000/file-000.parquet", "videos/observation.images.top/c/f.mp4", "a", "...", "a/...b", "x/y:z"]
)
def test_safe_relative_paths(rel):
    assert relative_problem(rel) is None


@pytest.mark.parametrize(
    "rel, why",
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("//host/x", "absolute"),
        ("a/../../b", "'..'"),
        ("..", "'..'"),
        ("a//b", "empty"),
        ("./a", "'.'"),
        ("a/", "empty"),
        ("a\\..\\b", "character"),
        ("a%2e%2e", "character '%'"),
        ("a?b", "character '?'"),
        ("a#b", "character '#'"),
        ("a\x00b", "character"),
        ("a\nb", "character"),
        ("http://h/x", "scheme"),
        ("C:/x", "scheme"),
        (None, "not a string"),
    ],
)
def test_unsafe_relative_paths(rel, why):
    problem = relative_problem(rel)
    assert problem is not None and why in problem, problem


def test_render_uses_only_the_given_placeholders():
    assert (
        render("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "w", chunk_index=1, file_index=22)
        == "data/chunk-001/file-022.parquet"
    )
    with pytest.raises(DatasetFormatError, match=r"^w: .*unknown placeholder \{episode_index\}") as e:
        render("{episode_index}.parquet", "w", chunk_index=1, file_index=2)
    assert not isinstance(e.value, UnsafePathError)
    with pytest.raises(DatasetFormatError, match="not a plain name"):
        render("{chunk_index.real}", "w", chunk_index=1)
    with pytest.raises(DatasetFormatError, match="cannot be formatted"):
        render("{video_key:03d}", "w", video_key="top")
    with pytest.raises(UnsafePathError, match=r"w \(video_key='\.\.', chunk_index=0\): path '\.\./0'"):
        render("{video_key}/{chunk_index}", "w", video_key="..", chunk_index=0)
    with pytest.raises(UnsafePathError, match="character"):
        render("v/{chunk_index:c}", "w", chunk_index=0)  # chr(0)


def test_render_many_checks_every_path():
    good = render_many("e/{episode_chunk}/{episode_index:06d}.parquet", "w", episode_chunk=[0, 0], episode_index=[1, 2])
    assert good == ["e/0/000001.parquet", "e/0/000002.parquet"]
    with pytest.raises(UnsafePathError, match=r"video_key='\.\.'"):
        render_many("v/{video_key}/{video_key}/x", "w", video_key=["top", ".."])
    with pytest.raises(UnsafePathError, match=r"chunk_index=47"):  # '{chunk_index:c}' of 47 is '/'
        render_many("v/{chunk_index:c}x", "w", chunk_index=[97, 47])


def test_template_problems():
    assert template_problems("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", DATA_FIELDS) == []
    ((text, kind),) = template_problems("../{video_key}/{chunk_index}/{file_index}", VIDEO_FIELDS)
    assert kind is UnsafePathError and "'..'" in text
    ((text, kind),) = template_problems("{chunk_index}/{x}", DATA_FIELDS)
    assert kind is DatasetFormatError and "{x}" in text
    ((text, kind),) = template_problems("{chunk_index", DATA_FIELDS)
    assert "not a valid path template" in text


def test_inside_resolves_links(tmp_path):
    (tmp_path / "root/a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "root/in").symlink_to(tmp_path / "root/a")
    (tmp_path / "root/away").symlink_to(tmp_path / "out")
    assert inside(tmp_path / "root", "in/f", "w") == str(tmp_path / "root/in/f")
    with pytest.raises(UnsafePathError, match=r"^w: .*/root/away/f resolves to .*/out/f, outside .*/root"):
        inside(tmp_path / "root", "away/f", "w")
    with pytest.raises(UnsafePathError, match="'..'"):
        inside(tmp_path / "root", "../out/f", "w")


def test_dataset_path_refuses_special_files(tmp_path):
    """A FIFO or a socket is never a dataset file (open() of a FIFO blocks); directories and missing files pass
    (opening a missing one says so)."""
    import socket

    fs = LocalFileSystem()
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text("{}")
    os.mkfifo(tmp_path / "meta/pipe.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "meta/sock.json"))
    assert dataset_path(fs, str(tmp_path), "meta/info.json") == str(tmp_path / "meta/info.json")
    assert dataset_path(fs, str(tmp_path), "meta") == str(tmp_path / "meta")
    assert dataset_path(fs, str(tmp_path), "meta/missing.json") == str(tmp_path / "meta/missing.json")
    with pytest.raises(UnsafePathError, match=r"meta/pipe\.json is a FIFO \(named pipe\), not a regular file"):
        dataset_path(fs, str(tmp_path), "meta/pipe.json", "<root>/meta/info.json: field 'x'")
    with pytest.raises(UnsafePathError, match=r"meta/sock\.json is a socket, not a regular file"):
        dataset_path(fs, str(tmp_path), "meta/sock.json")
    sock.close()


def test_dataset_path_on_a_remote_filesystem_stays_under_the_prefix():
    class Remote:  # any non-local fsspec filesystem: only the lexical check applies
        pass

    assert dataset_path(Remote(), "http://h/ds/", "meta/info.json") == "http://h/ds/meta/info.json"
    for rel in ("//other/x", "../x", "/x", "a/%2e%2e/x"):
        with pytest.raises(UnsafePathError):
            dataset_path(Remote(), "http://h/ds", rel)
    assert dataset_path(LocalFileSystem(), "/", "etc") == os.path.join("/", "etc")


def test_cache_names_and_repo_ids():
    assert cache_name("file-000.mp4") == "file-000.mp4"
    assert cache_name("../\x1b[2J é") == "___2J__"
    assert cache_name("..") == "_" and len(cache_name("x" * 500)) == 64
    for repo in ("lerobot/pusht", "pusht", "a-b/c_d.e"):
        assert check_repo_id(repo) == repo
    for repo in ("../x", "a/..", "/a/b", "a/b/c", "", "a b/c", "a/.hidden"):
        with pytest.raises(UnsafePathError):
            check_repo_id(repo)


def test_inside_agrees_with_realpath_on_links_at_every_depth(tmp_path):
    """`inside` looks at the components below the (resolved once) root only; its verdict equals the definition,
    written here with `os.path.realpath` of the whole path, for links at every depth: into the root and out of
    it, relative and absolute, chained, to a file, dangling, under a root that is itself a link, and for paths
    that do not exist (yet)."""
    real_root, out = tmp_path / "data/real", tmp_path / "out"
    (real_root / "a/b/c").mkdir(parents=True)
    (out / "x").mkdir(parents=True)
    (real_root / "a/b/c/f.mp4").write_bytes(b"")
    (out / "x/secret").write_bytes(b"")
    (tmp_path / "root").symlink_to(real_root, target_is_directory=True)  # the root itself: a link
    links = {
        "a/in": real_root / "a/b",  # absolute, inside
        "a/b/up": "../../a",  # relative, inside
        "a/away": out / "x",  # absolute, out
        "a/b/rel_away": "../../../../out/x",  # relative, out
        "a/b/c/file_out": out / "x/secret",  # a file link, out
        "a/b/c/file_in": "f.mp4",  # a file link, inside
        "a/chain": "in/up/away",  # a chain that leaves in its last link
        "out_back": None,  # made outside, leading back in: out/back -> root, root/out_back -> out
        "a/dangling": tmp_path / "nowhere/x",
    }
    (out / "back").symlink_to(real_root / "a", target_is_directory=True)
    for rel, target in links.items():
        (real_root / rel).symlink_to(out / "back" if target is None else target)
    rels = [
        "a/b/c/f.mp4",
        "a/in/c/f.mp4",
        "a/b/up/b/c/f.mp4",
        "a/away/secret",
        "a/b/rel_away/secret",
        "a/b/c/file_out",
        "a/b/c/file_in",
        "a/chain/secret",
        "out_back/b/c/f.mp4",
        "a/dangling/f",
        "a/missing/f.mp4",
        "a/b/c/new.mp4",
        "a/away/missing/deeper",
    ]
    root = str(tmp_path / "root")
    for rel in rels:
        real = os.path.realpath(os.path.join(root, rel))
        allowed = real == str(real_root) or real.startswith(str(real_root) + os.sep)
        if allowed:
            assert inside(root, rel, "w") == os.path.join(root, rel), rel
        else:
            with pytest.raises(UnsafePathError, match="outside"):
                inside(root, rel, "w")
    assert sum(
        (lambda r: r.startswith(str(real_root) + os.sep))(os.path.realpath(os.path.join(root, rel))) for rel in rels
    ) not in (0, len(rels))  # both verdicts occur
    later = tmp_path / "later"  # a root that does not exist yet, then is made as a link out
    assert inside(later, "f", "w") == str(later / "f")
    later.symlink_to(out / "x", target_is_directory=True)
    assert inside(later, "secret", "w") == str(later / "secret")  # the link is the root: its target is the root
    (out / "x/leak").symlink_to(tmp_path / "data", target_is_directory=True)
    with pytest.raises(UnsafePathError, match="outside"):
        inside(later, "leak/real/a/b/c/f.mp4", "w")
