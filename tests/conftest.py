"""Shared test data: small datasets written by episodic's own writer, once per session."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

# Registered before episodic is imported: before-fork hooks run last-registered first, so this one runs after
# episodic's (runtime.py), which stop its threads, and sees what is left alive at the fork itself.
assert "episodic" not in sys.modules, "tests/conftest.py must register its fork probe before episodic is imported"
THREADS_AT_FORK: list[list[str]] = []  # the names of the other threads alive at each os.fork of this process


def _record_threads_at_fork() -> None:
    import threading

    THREADS_AT_FORK.append(sorted(t.name for t in threading.enumerate() if t is not threading.current_thread()))


os.register_at_fork(before=_record_threads_at_fork)

from episodic.demo import write_demo_dataset  # noqa: E402

from support import DEPTH_CODINGS, FIXTURES, LEROBOT_FIXTURE, FaultServer, depth_frames  # noqa: F401,E402 (re-exported for tests)


@pytest.fixture()
def threads_at_fork() -> list[list[str]]:
    """The names of the other threads alive at each os.fork of this process during the test (after episodic's
    before-fork hooks ran)."""
    THREADS_AT_FORK.clear()
    yield THREADS_AT_FORK
    THREADS_AT_FORK.clear()


@pytest.fixture(autouse=True)
def _forget_hosts():
    """What the process learnt about remote hosts (down, held by a Retry-After) ends with each test: a later
    test's server on 127.0.0.1 may get the same port."""
    from episodic.storage.hosts import HOSTS

    yield
    HOSTS.forget()


@pytest.fixture(scope="session")
def small_root(tmp_path_factory) -> Path:
    """6 episodes of 12-30 frames, two 48x64 AV1 cameras, one file each."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("small") / "ds",
        num_episodes=6,
        min_length=12,
        max_length=30,
        height=48,
        width=64,
        progress=False,
    )


@pytest.fixture(scope="session")
def multifile_root(tmp_path_factory) -> Path:
    """12 episodes rotated into many data/video files and several chunk directories."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("multi") / "ds",
        num_episodes=12,
        min_length=10,
        max_length=25,
        height=48,
        width=64,
        progress=False,
        data_files_size_in_mb=0.004,
        video_files_size_in_mb=0.006,
        chunks_size=3,
        seed=1,
    )


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """12 tiny heterogeneous datasets written by episodic's writer (`mixture.synthetic`: v3.0 and, every 4th from
    the third, v2.1; 1-4 cameras of 4 sizes, dims 6-14, fps 10-50), each 2-4 episodes of 5-16 frames."""
    from episodic.testing.synthetic import write_synthetic_datasets

    return write_synthetic_datasets(tmp_path_factory.mktemp("mixture"), 12, seed=1)


@pytest.fixture()
def copy_of(tmp_path):
    """copy_of(root) -> a writable copy of a dataset directory."""
    import shutil

    def make(root: os.PathLike) -> Path:
        dst = tmp_path / f"copy-{Path(root).name}"
        shutil.copytree(root, dst)
        return dst

    return make


@pytest.fixture()
def http_server(small_root):
    """`small_root`'s parent served by the fault-injecting HTTP server (tests/support.py), no Range support."""
    with FaultServer(small_root.parent, ranges=False) as server:
        yield server


@pytest.fixture()
def http_root(http_server, small_root) -> str:
    """The URL of `small_root` on `http_server`."""
    return f"{http_server.url}/{small_root.name}"


@dataclass(frozen=True)
class S3Server:
    """A moto S3 server process on 127.0.0.1 that checks credentials: `key`/`secret` may read `bucket`."""

    endpoint: str
    bucket: str
    key: str
    secret: str


S3_READ_POLICY = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}'


@pytest.fixture(scope="session")
def s3_server(small_root, tmp_path_factory):
    """moto's S3 server as a separate process on a free port of 127.0.0.1 (`moto_server -p 0`), killed at the end.
    Bucket "data" holds `small_root` under "small/" and the same without its top camera's mp4 under "broken/".
    Credentials are checked (moto's IAM): only the access key of the user made here may read."""
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline, port = time.monotonic() + 60, None
        while port is None:
            found = re.search(r"Running on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            port = int(found.group(1)) if found else None
            if port is None and (proc.poll() is not None or time.monotonic() > deadline):
                raise RuntimeError(f"moto server did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{port}"
        admin = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "setup",
            "aws_secret_access_key": "setup",
        }
        iam = boto3.client("iam", **admin)
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=S3_READ_POLICY)
        access = iam.create_access_key(UserName="reader")["AccessKey"]
        s3 = boto3.client("s3", **admin)
        s3.create_bucket(Bucket="data")
        for path in sorted(p for p in small_root.rglob("*") if p.is_file()):
            rel = path.relative_to(small_root).as_posix()
            s3.upload_file(str(path), "data", f"small/{rel}")
            if not rel.startswith("videos/observation.images.top/"):
                s3.upload_file(str(path), "data", f"broken/{rel}")
        # from now on every request must be signed by a known access key, with a policy that allows it
        urllib.request.urlopen(
            urllib.request.Request(
                f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
            ),
            timeout=10,
        ).read()
        yield S3Server(endpoint, "data", access["AccessKeyId"], access["SecretAccessKey"])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture()
def s3_env(s3_server, monkeypatch, tmp_path):
    """The environment a user of `s3_server` has: credentials and endpoint in AWS_* variables, no AWS config
    files; s3fs's per-process instance cache emptied before and after (instances remember credentials)."""
    s3fs = pytest.importorskip("s3fs")
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254 for credentials
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="session")
def depth_root(tmp_path_factory) -> Path:
    """3 episodes (9, 14, 11 frames) of an RGB camera (48x64, AV1), the two depth cameras of `DEPTH_CODINGS`
    (48x64, HEVC gray12le, written by episodic's writer), state and action."""
    import numpy as np

    from episodic.testing.synthetic import camera_frames
    from episodic.writer import DatasetWriter

    h, w = 48, 64
    features = {
        "observation.images.rgb": {"dtype": "video", "shape": [h, w, 3]},
        **{k: {"dtype": "video", "shape": [h, w, 1], "info": info} for k, info in DEPTH_CODINGS.items()},
        "observation.state": {"dtype": "float32", "shape": [3]},
        "action": {"dtype": "float32", "shape": [2]},
    }
    root = tmp_path_factory.mktemp("depth") / "ds"
    with DatasetWriter(root, fps=10, features=features, fsync=False) as wr:
        for e, n in enumerate((9, 14, 11)):
            d = depth_frames(h, w, n, e)
            wr.add_episode(
                {
                    "observation.images.rgb": camera_frames(h, w, n, e),
                    "observation.images.depth": d,
                    "observation.images.depth_mm": np.round(d * 1000).astype(np.uint16),
                    "observation.state": np.full((n, 3), e, np.float32),
                    "action": np.arange(2 * n, dtype=np.float32).reshape(n, 2),
                },
                task=f"task {e % 2}",
            )
    return root
