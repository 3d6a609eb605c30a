#!/usr/bin/env bash
# Create (or repair) a Python 3.11 virtualenv in which LeRobot 0.4.4 can write and read v3.0 datasets
# on CPU with video decoding (LeRobotDataset and StreamingLeRobotDataset) and run its training script
# (lerobot-train, ACT and Diffusion Policy on CPU). Idempotent.
#
#   benchmarks/setup_lerobot_venv.sh [VENV]        (default: .bench/lerobot-venv)
#
# Recipe (see benchmarks/LEROBOT_ENV.md for why):
#   * torch 2.14.1 + torchvision 0.29.1 (CUDA builds; torchvision's CUDA wheel does not import next to
#     the 2.13.0+cpu torch, and no CPU torchvision wheel is on PyPI). LeRobot only pins torch<2.11 in its
#     metadata; the dataset code runs fine on 2.14, so lerobot is installed with --no-deps.
#   * torchcodec 0.17.0 (stable-ABI builds, torch>=2.11). torchvision 0.29 has no torchvision.io.VideoReader,
#     so LeRobot's 'pyav' fallback backend is unusable; torchcodec is LeRobot's default backend anyway.
#   * torchcodec needs FFmpeg shared libraries; none are installed system-wide here, so we expose the
#     FFmpeg 7.1 that ships inside the PyAV 15.1 wheel (av.libs/) under the sonames torchcodec looks for,
#     in $VENV/ffmpeg-libs. Processes must start with LD_LIBRARY_PATH=$VENV/ffmpeg-libs:
#     use $VENV/bin/lerobot-python, `source $VENV/bin/activate`, or src/episodic/tools/bench/lerobot_side.py
#     (which re-execs itself with it).
set -euo pipefail

VENV="${1:-.bench/lerobot-venv}"
PY="${PYTHON:-python3.11}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
VENV="$(cd "$VENV" && pwd)"
PIP=("$VENV/bin/pip" install --disable-pip-version-check -q)

have() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }

have torch 2.14.1 && have torchvision 0.29.1 || "${PIP[@]}" torch==2.14.1 torchvision==0.29.1
have lerobot 0.4.4 || "${PIP[@]}" --no-deps lerobot==0.4.4
have torchcodec 0.17.0 || "${PIP[@]}" --no-deps torchcodec==0.17.0
# LeRobot 0.4.4 dataset dependencies (its pins where it has them), exact versions that were verified.
"${PIP[@]}" \
    "datasets==4.8.5" "huggingface-hub==0.35.3" "av==15.1.0" "jsonlines==4.0.0" "draccus==0.10.0" \
    "deepdiff==8.6.2" "imageio[ffmpeg]==2.38.1" "termcolor==3.3.0" "einops==0.8.2" "packaging==25.0" \
    "pandas==3.1.1" "pyarrow==26.0.1" "psutil==7.2.2" "accelerate==1.15.0" "safetensors==0.8.0" \
    "numpy==2.4.6" "pillow==13.0.0" "fsspec==2026.2.0"
# LeRobot 0.4.4 base dependencies for its training script (exact versions in its ranges; they add packages and
# change none of the above): lerobot.scripts.lerobot_train imports serial (lerobot.motors), gymnasium
# (lerobot.envs) and diffusers (Diffusion Policy); wandb (--wandb.enable=true) and cv2 complete the set.
"${PIP[@]}" "pyserial==3.5" "gymnasium==1.4.0" "diffusers==0.35.2" "wandb==0.24.2" \
    "opencv-python-headless==4.11.0.86"

# FFmpeg for torchcodec, from PyAV's wheel (benchmarks/link_pyav_ffmpeg.sh)
source "$(dirname "$0")/link_pyav_ffmpeg.sh"

# Smoke test: LeRobot picks torchcodec and torchcodec loads FFmpeg.
"$VENV/bin/lerobot-python" - <<'EOF'
import logging
logging.disable(logging.WARNING)
import torch, torchvision, torchcodec
from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads libtorchcodec_core7 + FFmpeg)
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset  # noqa: F401
from lerobot.datasets.video_utils import get_safe_default_codec
from lerobot.scripts import lerobot_train  # noqa: F401  (the training script's imports)
assert get_safe_default_codec() == "torchcodec"
import torchcodec._core.ops  # noqa: F401
print(f"ok: torch {torch.__version__}, torchvision {torchvision.__version__}, torchcodec {torchcodec.__version__}, "
      f"lerobot video backend {get_safe_default_codec()}")
EOF
