#!/usr/bin/env bash
# The GPU device check: ONE command on a lent GPU machine (H100/H200), from the repository root, with the wheels
# in .whl/ carried (made here by benchmarks/gpu/fetch_wheels.sh). About 4-5 minutes; everything lands in $OUT:
#   nvidia_smi.csv, doctor.txt/.json       the machine, the driver's NVDEC answers, the doctor on LeRobot's H.264
#   gpu_tests.txt                          the GPU tests (tests/datasets/test_gpu_device.py: items within 2/255 on
#                                          every frame, map-style, streaming, mixture; AV1's named error) and the
#                                          CPU-side GPU tests, now on the real machine
#   device_check.json/.txt                 accuracy on every frame, the NVDEC limit, the benchmark (docs/gpu.md)
# With the device tool: run(command="bash benchmarks/gpu/device_check.sh", carry=[".whl"], timeout_s=420)
set -uo pipefail
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 EPISODIC_PROGRESS=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheels did not install: run benchmarks/gpu/fetch_wheels.sh here and carry .whl"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/nvidia_smi.csv" 2>&1
echo "NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES:-unset}" >> "$OUT/nvidia_smi.csv"
python3 -m episodic.cli doctor tests/fixtures/lerobot_h264/dataset --json "$OUT/doctor.json" 2>&1 | tee "$OUT/doctor.txt"
timeout 200 python3 -m pytest -q -rs --timeout 120 tests/datasets/test_gpu_device.py tests/datasets/test_gpu_frames.py \
  tests/tools/test_doctor.py 2>&1 | tail -40 | tee "$OUT/gpu_tests.txt"
timeout 260 python3 benchmarks/gpu/device_check.py --out "$OUT" 2>&1 | tail -60 | tee "$OUT/device_check.txt"
echo "results in $OUT"
