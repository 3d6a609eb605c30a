#!/usr/bin/env bash
# The GPU device check: ONE command on a lent GPU machine (H100/H200), from the repository root, with the wheels
# in .whl/ carried (made here by benchmarks/gpu/fetch_wheels.sh). About 4-5 minutes; everything lands in $OUT:
#   nvidia_smi.csv, doctor.txt/.json       the machine, the driver's NVDEC answers, the doctor on LeRobot's H.264
#   device_check.json/.txt                 the library's raw frames, accuracy on every frame, the NVDEC limit, the
#                                          benchmark (docs/gpu.md); the JSON is written after every step
#   gpu_tests.txt                          the GPU tests (tests/datasets/test_gpu_device.py: items within 2/255 on
#                                          every frame, map-style, streaming, mixture; the named errors) and the
#                                          CPU-side GPU tests, now on the real machine
# Each step writes its file itself (no pipe that a DataLoader worker left alive could hold open), is bounded by
# `timeout`, and dumps every thread's stack when stopped (faulthandler on SIGABRT; pytest-timeout per test).
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
timeout -s ABRT 60 python3 -X faulthandler -m episodic.cli doctor tests/fixtures/lerobot_h264/dataset \
  --json "$OUT/doctor.json" > "$OUT/doctor.txt" 2>&1 < /dev/null
timeout -s ABRT 200 python3 -X faulthandler benchmarks/gpu/device_check.py --out "$OUT" --seconds 4 \
  > "$OUT/device_check.txt" 2>&1 < /dev/null
echo "device_check.py: exit $?"
timeout -s KILL 150 python3 -X faulthandler -m pytest -v -rs --timeout 30 -p no:cacheprovider \
  tests/datasets/test_gpu_device.py tests/datasets/test_gpu_frames.py tests/tools/test_doctor.py \
  > "$OUT/gpu_tests.txt" 2>&1 < /dev/null
echo "GPU tests: exit $?"
grep -E "PASSED|FAILED|ERROR|SKIPPED|^E " "$OUT/gpu_tests.txt" | head -60
grep -E "^== |^   [a-z_]+: [0-9.]+ s|^bar:" "$OUT/device_check.txt" | cut -c1-400
echo "results in $OUT"
