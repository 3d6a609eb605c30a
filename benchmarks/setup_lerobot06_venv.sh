#!/usr/bin/env bash
# Create (or repair) a Python 3.13 virtualenv with LeRobot 0.6.1 as pip installs it ("lerobot[dataset]==0.6.1",
# all of its own pins), in which LeRobot writes and reads v3.0 datasets on CPU with torchcodec. Idempotent.
#
#   benchmarks/setup_lerobot06_venv.sh [VENV]        (default: .bench/lerobot06-venv)
#
# Recipe (see benchmarks/LEROBOT_ENV.md, "LeRobot 0.6.1"):
#   * Python 3.13 (LeRobot 0.6 needs >= 3.12), built shared (libpython3.13.so, which torchcodec's custom ops
#     link against) by .ci/python313.sh when $PYTHON313 is not given: ~10 min on 2 cores, once, into /opt/py313.
#   * pip install "lerobot[dataset,accelerate-dep,diffusers-dep]==0.6.1" (accelerate, diffusers: its training
#     script, Diffusion Policy): its own
#     resolution, nothing pinned by hand (torch 2.11.0,
#     torchvision 0.26.0 and torchcodec 0.11.1 as resolved: PyPI's torch for Linux is a CUDA build, ~5 GB with
#     its nvidia-* wheels; this venv is opt-in, outside the default CI run).
#   * torchcodec needs FFmpeg shared libraries; none are installed system-wide here, so we expose the FFmpeg 7.1
#     that ships inside the PyAV 15.1 wheel LeRobot pins (av.libs/) under the sonames torchcodec looks for, in
#     $VENV/ffmpeg-libs. Processes must start with LD_LIBRARY_PATH=$VENV/ffmpeg-libs: use
#     $VENV/bin/lerobot-python, `source $VENV/bin/activate`, or src/episodic/tools/bench/lerobot_side.py (which
#     re-execs itself with it).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-.bench/lerobot06-venv}"
PY="${PYTHON313:-}"
if [ -z "$PY" ]; then
    PY="$(bash "$HERE/../.ci/python313.sh" | tail -n 1)"
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
VENV="$(cd "$VENV" && pwd)"
# accelerate-dep and diffusers-dep: LeRobot's own extras that its training script (lerobot-train) and Diffusion
# Policy need, for tests/lerobot/test_train06.py (`episodic lerobot-train` on LeRobot 0.6.1)
"$VENV/bin/python" -c "import importlib.metadata as m, sys, accelerate, diffusers
sys.exit(m.version('lerobot') != '0.6.1')" 2>/dev/null ||
    "$VENV/bin/pip" install --disable-pip-version-check -q "lerobot[dataset,accelerate-dep,diffusers-dep]==0.6.1"

# FFmpeg for torchcodec, from PyAV's wheel (benchmarks/link_pyav_ffmpeg.sh)
source "$(dirname "$0")/link_pyav_ffmpeg.sh"

# Smoke test: LeRobot picks torchcodec and torchcodec loads FFmpeg.
"$VENV/bin/lerobot-python" - <<'EOF'
import logging
logging.disable(logging.WARNING)
import torch, torchvision, torchcodec
from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads libtorchcodec_core7 + FFmpeg)
import lerobot
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset  # noqa: F401
from lerobot.datasets.video_utils import get_safe_default_video_backend
assert lerobot.__version__ == "0.6.1", lerobot.__version__
assert get_safe_default_video_backend() == "torchcodec"
print(f"ok: lerobot {lerobot.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
      f"torchcodec {torchcodec.__version__}, video backend {get_safe_default_video_backend()}")
EOF
