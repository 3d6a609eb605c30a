#!/usr/bin/env bash
# Here (a machine with PyPI): the wheels the GPU machine lacks, for its Python 3.12 x86_64, into .whl/ (ignored by
# git; the device tool's `carry` takes it along). PyNvVideoCodec is slimmed (its FFmpeg source tarball, samples and
# benchmarks dropped; RECORD rewritten) so that the tree, the wheels and the tests' fixtures stay under the device
# tool's 64 MiB. Usage: bash benchmarks/gpu/fetch_wheels.sh   (from the repository root)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' .gitignore || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
for w in pynvvideocodec==2.2.4 av==18.1.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
    -d .whl "$w"
done
python3 - <<'PY'
import base64, hashlib, glob, os, zipfile
src = glob.glob(".whl/pynvvideocodec-*.whl")[0]
drop = ("pynvvideocodec-2.2.4.data/", "samples/", "benchmarks/")
with zipfile.ZipFile(src) as z:
    if not any(n.startswith(drop) for n in z.namelist()):
        raise SystemExit  # slimmed already
tmp = src + ".tmp"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
    rows = []
    for item in zin.infolist():
        if item.filename.startswith(drop) or item.filename == record_name:
            continue
        data = zin.read(item.filename)
        zout.writestr(item, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{item.filename},sha256={digest},{len(data)}")
    zout.writestr(record_name, "\n".join(rows + [f"{record_name},,"]) + "\n")
os.replace(tmp, src)
PY
du -ch .whl/*.whl | tail -1
