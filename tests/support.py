"""Helpers shared by several test modules (test data paths, the fault-injecting HTTP server, item checks)."""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import torch

FIXTURES = Path(__file__).parent / "fixtures"
LEROBOT_FIXTURE = FIXTURES / "lerobot-0.4.4"
REPO = Path(__file__).resolve().parents[1]


def lerobot_python() -> Path | None:
    """`bin/lerobot-python` (its python, with the FFmpeg that torchcodec needs on the library path) of the
    LeRobot 0.4.4 venv made by benchmarks/setup_lerobot_venv.sh: the venv named by $EPISODIC_LEROBOT_VENV,
    else .bench/lerobot-venv in this repository; None when there is none."""
    venv = Path(os.environ.get("EPISODIC_LEROBOT_VENV") or REPO / ".bench" / "lerobot-venv")
    python = venv / "bin" / "lerobot-python"
    return python if python.exists() else None


H100 = "NVIDIA H100 80GB HBM3"
SUPPORTED = {"h264": True, "hevc": True, "av1": False}  # what an H100's driver answers (measured on an H200)
# NVDEC's smallest pictures per codec (NVIDIA Video Codec SDK, NVDEC application note): HEVC and AV1 refuse what
# H.264 takes, so a 96x128 HEVC camera is the driver's "under the minimum" answer
MIN_SIZE = {"h264": (48, 16), "hevc": (144, 144), "av1": (128, 128)}


class FakeNvdecDriver:
    """The driver's capability query as an H100 (or, with av1=True, an L4) answers it."""

    def __init__(self, name=H100, av1=False, engines=7, min_width=None):
        self.gpu, self.av1, self.engines, self.min_width, self.asked = name, av1, engines, min_width, []

    def count(self):
        return 1

    def name(self, i):
        return self.gpu

    def caps(self, i, codec, chroma, depth):
        from episodic.video.nvdec_caps import CodecSupport

        self.asked.append((codec, chroma, depth))
        ok = (SUPPORTED.get(codec, False) or (codec == "av1" and self.av1)) and chroma == 420 and depth == 8
        min_w, min_h = MIN_SIZE.get(codec, (48, 16)) if self.min_width is None else (self.min_width, 16)
        return CodecSupport(
            codec,
            chroma,
            depth,
            supported=ok,
            engines=self.engines if ok else 0,
            max_width=8192 if ok else 0,
            max_height=8192 if ok else 0,
            min_width=min_w if ok else 0,
            min_height=min_h if ok else 0,
        )


def lerobot06_python() -> Path | None:
    """`bin/lerobot-python` of the LeRobot 0.6.1 venv made by benchmarks/setup_lerobot06_venv.sh: the venv named
    by $EPISODIC_LEROBOT06_VENV, else .bench/lerobot06-venv in this repository; None when there is none."""
    venv = Path(os.environ.get("EPISODIC_LEROBOT06_VENV") or REPO / ".bench" / "lerobot06-venv")
    python = venv / "bin" / "lerobot-python"
    return python if python.exists() else None


def assert_items_equal(want: dict, got: dict) -> None:
    assert set(want) == set(got)
    for key, value in want.items():
        if key == "task":
            assert value == got[key]
        else:
            assert value.dtype == got[key].dtype and torch.equal(value, got[key]), key


DEPTH_CODINGS = {  # the depth cameras of `depth_root`: LeRobot 0.6's defaults (log, metres), and linear in mm
    "observation.images.depth": {"is_depth_map": True},
    "observation.images.depth_mm": {
        "is_depth_map": True,
        "depth_unit": "mm",
        "video.use_log": False,
        "video.depth_min": 0.2,
        "video.depth_max": 4.0,
    },
}


def depth_frames(h: int, w: int, n: int, seed: int) -> np.ndarray:
    """(n, h, w, 1) float32 metres from 0.005 to 12 (beyond LeRobot's default range on both sides)."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, h)[None, :, None, None]
    base = 0.3 + 11.7 * y**2 + 0.2 * np.sin(np.arange(w)[None, None, :, None] * 0.3 + np.arange(n)[:, None, None, None])
    noise = rng.uniform(-0.05, 0.05, size=(n, h, w, 1))
    d = np.broadcast_to(base, (n, h, w, 1)) + noise
    d[:, : h // 6, : w // 6] = 0.005
    return d.astype(np.float32)


def encode_segment(path: Path | str, episode: int, frames: int, height: int = 48, width: int = 64, **opts) -> str:
    """An mp4 of the demo's synthetic episode `episode` (`frames` frames at 30 fps), encoded by the writer's
    `VideoFileWriter` with `opts` (vcodec, gop, ...); returns its path."""
    from episodic.demo import synthetic_episode
    from episodic.writer.video import VideoFileWriter

    w = VideoFileWriter(str(path), width, height, 30, **opts)
    w.add(synthetic_episode(episode, frames, height=height, width=width)["observation.images.top"])
    w.close()
    return str(path)


class _FaultHandler(http.server.BaseHTTPRequestHandler):
    """One request of a `FaultServer` (see there)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as real servers: a killed server must drop open connections

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.owner.lock:
            self.server.owner.connections.add(self.connection)

    def finish(self):
        with self.server.owner.lock:
            self.server.owner.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _drop(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.close_connection = True
        self.connection.close()

    def send_response(self, code, message=None):
        srv: FaultServer = self.server.owner
        with srv.lock:
            srv.answers.append((time.time(), self.command, urllib.parse.unquote(self.path.split("?", 1)[0]), code))
        super().send_response(code, message)

    def _serve(self, head: bool) -> None:
        srv: FaultServer = self.server.owner
        path = urllib.parse.unquote(self.path.split("?", 1)[0])
        with srv.lock:
            srv.requests.append((self.command, path, self.headers.get("Range")))
            fault = None
            if (
                srv.faults
                and self.command in srv.fault_methods
                and (srv.fault_paths is None or path in srv.fault_paths)
            ):
                fault = srv.faults.pop(0)
            elif not head and srv.fail_rate and srv.rng.random() < srv.fail_rate:
                fault = srv.rng.choice(["500", "reset", "truncate"])
            if fault is not None:
                srv.failures += 1
        while srv.hang.is_set() and not srv.killed.is_set():  # a hung server: accepts, never answers
            time.sleep(0.01)
        if srv.killed.is_set():
            return self._drop()
        if fault == "sleep":
            time.sleep(srv.sleep_s)
        data, version = srv.content(path)
        if data is None or fault == "404":
            return self._status(404)
        if fault in ("500", "502", "503", "403"):
            return self._status(int(fault))
        if fault == "429":
            return self._status(429, {"Retry-After": srv.retry_after})
        if fault == "reset":
            return self._drop()
        size = len(data)
        lo, hi, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng and srv.ranges and fault != "norange" and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            lo, hi = (int(a), min(int(b) + 1 if b else size, size)) if a else (max(size - int(b), 0), size)
            if lo >= size:
                return self._status(416, {"Content-Range": f"bytes */{size}"})
            status = 206
        body = data[lo:hi]
        if fault == "short":
            body = body[: len(body) // 2]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if srv.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {lo}-{hi - 1}/{size}")
        for key, value in version.items():
            self.send_header(key, value)
        self.end_headers()
        if head:
            return
        if fault == "truncate" and len(body) > 1:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        with srv.lock:
            srv.bytes_sent += len(body)
        try:
            self.wfile.write(body)
        except OSError:  # the client gave up (a timeout)
            self.close_connection = True

    def _status(self, code: int, headers: dict | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()


class FaultServer:
    """A static HTTP/1.1 server on 127.0.0.1 (a real socket, keep-alive) that misbehaves on demand.

    Content: `files` ({"/path": bytes}, paths unquoted) when given, else the files under `directory`, read at each
    request (a file changed on disk is served changed). With `validators` each answer carries an ETag (a digest of the
    content) and, for files on disk, Last-Modified. Range requests are honoured when `ranges`.

    Faults: `faults` is a queue, one per request (requests whose method is in `fault_methods`, GET by default, and whose
    path is in `fault_paths` when set): "500", "502", "503", "403", "404", "429" (Retry-After: `retry_after`), "reset"
    (connection dropped), "truncate" (body cut, connection dropped), "short" (a shorter body, announced as such),
    "sleep" (answer after `sleep_s`), "norange" (Range ignored). `fail_rate`: that fraction of the other GETs fails at
    random (500, reset, truncate). `failures` counts injected faults.
    `hang.set()`: every request waits, never answering, until cleared. `kill()`: stop listening and drop
    every open connection (connection refused from then on); `start()`: listen again on the same port.
    `requests` lists (method, path, Range header) of every request; `answers` (time.time() when the answer was
    sent, method, path, HTTP status) of every answer (none for a dropped connection); `served(path)` counts the
    GETs answered with the file (200/206), `answered(status)` the answers with a status; `bytes_sent` the body
    bytes of the answers sent whole (not those of injected faults)."""

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        files: dict[str, bytes] | None = None,
        ranges: bool = True,
        validators: bool = True,
        seed: int = 0,
    ):
        self.directory = Path(directory) if directory is not None else None
        self.files = files
        self.ranges, self.validators = ranges, validators
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str | None]] = []
        self.answers: list[tuple[float, str, str, int]] = []
        self.faults: list[str] = []
        self.fault_paths: set[str] | None = None
        self.fault_methods = {"GET"}
        self.fail_rate = 0.0
        self.failures = 0
        self.bytes_sent = 0  # body bytes of the complete answers to GETs
        self.rng = random.Random(seed)
        self.retry_after = "1"
        self.sleep_s = 2.0
        self.hang = threading.Event()
        self.killed = threading.Event()
        self.connections: set[socket.socket] = set()
        self.port = 0
        self._server = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def content(self, path: str) -> tuple[bytes | None, dict]:
        """(bytes, validator headers) of `path`, or (None, {}) when there is no such file."""
        if self.files is not None:
            data, mtime = self.files.get(path), None
        else:
            local = self.directory / path.lstrip("/")
            try:
                data, mtime = local.read_bytes(), local.stat().st_mtime
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                data, mtime = None, None
        if data is None or not self.validators:
            return data, {}
        headers = {"ETag": f'"{hashlib.sha1(data).hexdigest()[:16]}"'}
        if mtime is not None:
            headers["Last-Modified"] = email.utils.formatdate(mtime, usegmt=True)
        return data, headers

    def start(self) -> None:
        """Listen (again, on the same port after `kill()`)."""
        self.killed.clear()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), _FaultHandler, bind_and_activate=False)
        server.allow_reuse_address = True
        server.server_bind()
        server.server_activate()
        server.daemon_threads = True
        server.handle_error = lambda *a: None  # clients that gave up leave broken pipes behind
        server.owner = self
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def kill(self) -> None:
        """Stop listening and drop every open connection."""
        self.killed.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            conns = list(self.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    close = kill

    def gets(self, path: str | None = None) -> int:
        """GET requests so far (for `path` only, when given)."""
        return sum(1 for m, p, _ in self.requests if m == "GET" and (path is None or p == path))

    def served(self, path: str | None = None) -> int:
        """GETs answered with the file's bytes (200 or 206) so far (for `path` only, when given)."""
        return sum(
            1 for _, m, p, status in self.answers if m == "GET" and status in (200, 206) and (path is None or p == path)
        )

    def answered(self, status: int, path: str | None = None) -> list[tuple[float, str, str, int]]:
        """The answers with `status` so far (for `path` only, when given)."""
        return [a for a in self.answers if a[3] == status and (path is None or a[2] == path)]

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


# ---------------------------------------------------------------------------------------------- a local Hub
class HubRepo:
    """A dataset repo: revision name or commit sha -> (sha, directory)."""

    def __init__(self, revisions: dict[str, Path]):
        self.refs: dict[str, tuple[str, Path]] = {}
        for name, root in revisions.items():
            sha = hashlib.sha1(f"{name}:{root}".encode()).hexdigest()
            self.refs[name] = self.refs[sha] = (sha, root)


def _hub_entry(root: Path, path: Path) -> dict:
    rel = path.relative_to(root).as_posix()
    if path.is_dir():
        return {"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "path": rel}
    data = path.read_bytes()
    return {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": rel}


class HubHandler(http.server.BaseHTTPRequestHandler):
    """The part of the Hugging Face Hub API that huggingface_hub uses (a `HubServer`'s requests): GET
    /api/datasets/<repo>[/revision/<rev>], GET /api/datasets/<repo>/tree/<rev>[/<path>], POST
    /api/datasets/<repo>/paths-info/<rev>, GET|HEAD /datasets/<repo>/resolve/<rev>/<path> (Range). Unknown repos,
    revisions and paths get 404 with the Hub's X-Error-Code."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes

    def log_message(self, *args):
        pass

    def _json(self, value, status: int = 200) -> None:
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _missing(self, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        self.send_response(404)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _resolve(self, parts: list[str]) -> tuple[str, Path, list[str]] | None:
        """<namespace>/<name>/<kind>/<rev>/<path...> -> (sha, directory, path parts), or None (answered 404)."""
        repo_id, rev = "/".join(parts[:2]), urllib.parse.unquote(parts[3]) if len(parts) > 3 else ""
        repo = self.server.repos.get(repo_id)
        if repo is None:
            self._missing("RepoNotFound")
            return None
        if rev not in repo.refs:
            self._missing("RevisionNotFound")
            return None
        sha, root = repo.refs[rev]
        return sha, root, [urllib.parse.unquote(p) for p in parts[4:] if p]

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        if parts[:2] != ["api", "datasets"] or len(parts) < 6 or parts[4] != "paths-info":
            return self._missing("EntryNotFound")
        found = self._resolve(parts[2:])
        if found is None:
            return
        _, root, _ = found
        paths = urllib.parse.parse_qs(body).get("paths", [])
        self._json([_hub_entry(root, root / p) for p in paths if (root / p).exists()])

    def do_HEAD(self):
        self._get(head=True)

    def do_GET(self):
        self._get(head=False)

    def _get(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        with self.server.lock:
            self.server.requests.append((self.command, url.path))
        if parts[:2] == ["api", "datasets"] and len(parts) == 4:  # repo info without a revision: main
            parts += ["revision", "main"]
        if parts[:2] == ["api", "datasets"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            found = self._resolve(parts[2:])
            if found is None:
                return
            sha, root, rel = found
            if parts[4] == "revision":
                return self._json(
                    {
                        "id": "/".join(parts[2:4]),
                        "sha": sha,
                        "private": False,
                        "siblings": [
                            {"rfilename": p.relative_to(root).as_posix()}
                            for p in sorted(root.rglob("*"))
                            if p.is_file()
                        ],
                    }
                )
            folder = root.joinpath(*rel)
            if not folder.is_dir():
                return self._missing("EntryNotFound")
            recursive = urllib.parse.parse_qs(url.query).get("recursive", ["False"])[0].lower() == "true"
            children = sorted(folder.rglob("*") if recursive else folder.iterdir())
            return self._json([_hub_entry(root, p) for p in children])
        if parts[0] == "datasets" and len(parts) >= 6 and parts[3] == "resolve":
            found = self._resolve(parts[1:])
            if found is None:
                return
            sha, root, rel = found
            path = root.joinpath(*rel)
            if not path.is_file():
                return self._missing("EntryNotFound")
            return self._file(path.read_bytes(), sha, head)
        self._missing("EntryNotFound")

    def _file(self, data: bytes, sha: str, head: bool) -> None:
        lo, hi, status = 0, len(data) - 1, 200
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            a, _, b = ranged[6:].partition("-")
            lo, hi = (
                (int(a), min(int(b) if b else len(data) - 1, len(data) - 1))
                if a
                else (max(len(data) - int(b), 0), len(data) - 1)
            )
            status = 206
        body = data[lo : hi + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", sha)
        if status == 206:
            self.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
        self.end_headers()
        if not head:
            self.wfile.write(body)


class HubServer:
    """A Hugging Face Hub on 127.0.0.1 (real sockets) answering what huggingface_hub's downloads and HfFileSystem
    ask (`HubHandler`): `repos` maps repo ids to `HubRepo`s; `endpoint` is its URL (HF_ENDPOINT, or storage_options'
    "endpoint"); `requests` lists (method, path) of every GET and HEAD."""

    def __init__(self, repos: dict[str, HubRepo]):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
        self._server.daemon_threads = True
        self._server.repos = self.repos = dict(repos)
        self._server.lock, self._server.requests = threading.Lock(), []
        self.requests = self._server.requests
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    return img[..., :3]


def assert_picture(img: np.ndarray, min_colours: int = 8) -> None:
    assert float(img.std()) > 0.05, "image is (nearly) blank"
    colours = np.unique((img.reshape(-1, 3) * 255).round().astype(np.uint8), axis=0)
    assert len(colours) >= min_colours, f"only {len(colours)} distinct colours"


def add_image_feature(root: Path, key: str, h: int, w: int) -> None:
    """Give the dataset at `root` (a writable copy) an 'image' feature `key`: PNG bytes of an (h, w) picture per
    row in its data files (red = 7 * index, a green line at row index % h), declared in info.json."""
    import io

    import matplotlib.image as mpimg
    import pyarrow as pa
    import pyarrow.parquet as pq

    info = json.loads((root / "meta/info.json").read_text())
    info["features"][key] = {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channels"]}
    (root / "meta/info.json").write_text(json.dumps(info))
    for path in (root / "data").rglob("*.parquet"):
        t = pq.read_table(path)
        pngs = []
        for i in t.column("index").to_pylist():
            img = np.zeros((h, w, 3), np.uint8)
            img[..., 0], img[i % h, :, 1] = (i * 7) % 256, 255
            buf = io.BytesIO()
            mpimg.imsave(buf, img, format="png")
            pngs.append(buf.getvalue())
        pq.write_table(t.append_column(key, pa.array(pngs, pa.binary())), path)
