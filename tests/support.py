"""Helpers shared by several test modules (test data paths, a static HTTP server with faults, item checks)."""

from __future__ import annotations

import http.server
import os
import random
import socket
import threading
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


def assert_items_equal(want: dict, got: dict) -> None:
    assert set(want) == set(got)
    for key, value in want.items():
        if key == "task":
            assert value == got[key]
        else:
            assert value.dtype == got[key].dtype and torch.equal(value, got[key]), key


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with Range support; fails a fraction of requests (500, reset, truncated body)."""

    fail_rate = 0.0
    rng = random.Random(0)
    lock = threading.Lock()
    failures = 0

    def log_message(self, *args):
        pass

    def _fault(self) -> str | None:
        with self.lock:
            if self.rng.random() >= type(self).fail_rate:
                return None
            type(self).failures += 1
            return self.rng.choice(["500", "reset", "truncate"])

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def _serve(self, head: bool):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        fault = None if head else self._fault()  # HEAD failures are absorbed by fsspec (it falls back to GET)
        if fault == "500":
            self.send_error(500, "injected")
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.close_connection = True
            self.connection.close()
            return
        data = Path(path).read_bytes()
        size = len(data)
        lo, hi = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            if a:
                lo, hi = int(a), min(int(b) if b else size - 1, size - 1)
            else:
                lo, hi = max(size - int(b), 0), size - 1
            if lo >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.end_headers()
                return
            status = 206
        body = data[lo:hi + 1]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {lo}-{hi}/{size}")
        self.end_headers()
        if head:
            return
        if fault == "truncate" and len(body) > 1:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


def read_png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    return img[..., :3]


def assert_picture(img: np.ndarray, min_colours: int = 8) -> None:
    assert float(img.std()) > 0.05, "image is (nearly) blank"
    colours = np.unique((img.reshape(-1, 3) * 255).round().astype(np.uint8), axis=0)
    assert len(colours) >= min_colours, f"only {len(colours)} distinct colours"
