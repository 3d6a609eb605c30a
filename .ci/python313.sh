#!/usr/bin/env bash
# Build CPython 3.13 from Debian 13's source package (the machines run Debian 12 with Python 3.11 only; the
# package registry serves Debian 13's sources). About 10 minutes on 2 cores. Idempotent. Built shared
# (libpython3.13.so), which torchcodec's custom ops need. Used by .ci/run (the suite on 3.13) and
# benchmarks/setup_lerobot06_venv.sh (LeRobot 0.6.1's venv).
#   python313.sh [PREFIX]        default PREFIX: /opt/py313; prints the interpreter's path last
set -euo pipefail
P=${1:-/opt/py313}
if [ ! -x "$P/bin/python3.13" ]; then
  W=$(mktemp -d); mkdir -p "$W/lists/partial"; cd "$W"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)  # the machine's own Debian mirror
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" > "$W/trixie.list"
  o=(-o Dir::Etc::sourcelist="$W/trixie.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$W/lists")
  apt-get "${o[@]}" update -qq
  apt-get "${o[@]}" source --download-only python3.13 >/dev/null 2>&1
  tar xf python3.13_*.orig.tar.xz
  cd Python-3.13.*/
  ./configure -q --prefix="$P" --enable-shared LDFLAGS="-Wl,-rpath,$P/lib" >/dev/null
  make -s -j"$(nproc)" >/dev/null 2>&1
  make -s install >/dev/null 2>&1
  rm -rf "$W"
fi
"$P/bin/python3.13" -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib, readline, sysconfig; assert sysconfig.get_config_var('Py_ENABLE_SHARED')" >/dev/null
echo "$P/bin/python3.13"
