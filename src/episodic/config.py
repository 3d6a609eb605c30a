"""Every environment variable episodic reads, in one place (read when asked, so a changed variable counts).

Each variable, its default (what holds when it is unset), and what it means:

- `EPISODIC_CACHE` (default `$XDG_CACHE_HOME/episodic`): root of episodic's cache (remote files, tabular memory
  maps, streaming mirrors, computed statistics, demo data).
- `XDG_CACHE_HOME` (default `~/.cache`): the user's cache root, when `EPISODIC_CACHE` is unset.
- `HF_LEROBOT_HOME` (default: under the episodic cache): where Hub datasets are downloaded (LeRobot's variable):
  `<it>/<repo_id>`.
- `EPISODIC_DECODE_THREADS` (default: the process's share of the cores): video decode threads per process.
- `EPISODIC_WORKER_SHARING` (default `file_system`): tensor sharing of DataLoader workers when a loader says
  `sharing="auto"`.
- `EPISODIC_FORCE_MMAP` (default off: memory-map from 1 GiB): memory-map tabular columns (in the cache) whatever
  their size (tests, small machines).
- `EPISODIC_PROGRESS` (default on): `0` silences every progress bar (bars show only on a terminal anyway).
- `EPISODIC_FETCH_TIMEOUT` (default `20`): read timeout of remote requests: seconds a request may wait for the next
  bytes (or for a size or metadata answer) before it counts as a transient failure and is retried; `0`: no limit.
- `EPISODIC_CONNECT_TIMEOUT` (default `10`): seconds a remote request may take to connect; `0`: no limit.
- `EPISODIC_RETRY_WINDOW` (default `30`): seconds after a remote read's first attempt (or after its host fell
  silent) during which transient failures are retried; a host silent that long fails every request at once for as
  long again; `0`: no retries.
- `EPISODIC_CACHE_MAX_BYTES` (default `32G`): size of the whole-file cache of remote files (`files/`), least
  recently used files evicted beyond it; a number of bytes, or with a K/M/G/T suffix.
- `EPISODIC_ENCODER_STALL_TIMEOUT` (default `60`): seconds a video encoder may go without progress (a frame
  encoded, the file finished) before the writer takes it for hung and encodes the file again with a fresh one.
- `LOCAL_RANK` (default unset: ranks are grouped by host name): the process's rank on its node, as launchers set it
  (torchrun, accelerate, deepspeed): a mixture's start-up downloads on local rank 0.
- `GROUP_RANK` (default unset): torchrun's node rank: with the host name, what tells nodes apart (two nodes on one
  host).
- `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT` (default unset): a SLURM job array's task:
  `episodic fleet --shard slurm` works on task (ID - MIN)'s share of the list.

episodic also sets one variable, for its children: `SVT_LOG=1` when the writer starts an SVT-AV1 encoder and the
variable is unset (the encoder prints a banner at every start otherwise).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "cache_dir",
    "hub_home",
    "decode_threads_override",
    "worker_sharing",
    "force_mmap",
    "fetch_timeout_s",
    "connect_timeout_s",
    "retry_window_s",
    "file_cache_max_bytes",
    "progress_allowed",
    "encoder_stall_timeout_s",
    "quiet_svt_av1",
    "local_rank",
    "node_name",
    "slurm_array_task",
]

SHARING_STRATEGIES = ("file_system", "file_descriptor")


def cache_dir() -> Path:
    """Root of episodic's cache: $EPISODIC_CACHE, else $XDG_CACHE_HOME/episodic, else ~/.cache/episodic."""
    base = os.environ.get("EPISODIC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "episodic"
    )
    return Path(base)


def hub_home() -> Path | None:
    """$HF_LEROBOT_HOME (LeRobot's download root) when set."""
    base = os.environ.get("HF_LEROBOT_HOME")
    return Path(base) if base else None


def decode_threads_override() -> int | None:
    """$EPISODIC_DECODE_THREADS as a positive int, or None when unset."""
    value = os.environ.get("EPISODIC_DECODE_THREADS")
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"EPISODIC_DECODE_THREADS must be a positive integer, got {value!r}")
    return n


def worker_sharing() -> str:
    """$EPISODIC_WORKER_SHARING: 'file_system' (default) or 'file_descriptor'."""
    value = os.environ.get("EPISODIC_WORKER_SHARING", "file_system")
    if value not in SHARING_STRATEGIES:
        raise ValueError(f"EPISODIC_WORKER_SHARING must be one of {SHARING_STRATEGIES}, got {value!r}")
    return value


def force_mmap() -> bool:
    """$EPISODIC_FORCE_MMAP set to anything but '' or '0'."""
    return os.environ.get("EPISODIC_FORCE_MMAP", "") not in ("", "0")


def _seconds(name: str, default: float, hi: float = 3600) -> float:
    """$name as seconds in [0, hi] (default when unset or empty)."""
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= hi:
        raise ValueError(f"{name} must be a number of seconds in [0, {hi:g}], got {value!r}")
    return seconds


def fetch_timeout_s() -> float | None:
    """$EPISODIC_FETCH_TIMEOUT: the read timeout of remote requests in seconds (default 20); None when set
    to 0 (no limit)."""
    return _seconds("EPISODIC_FETCH_TIMEOUT", 20.0) or None


def connect_timeout_s() -> float | None:
    """$EPISODIC_CONNECT_TIMEOUT: the connect timeout of remote requests in seconds (default 10); None when
    set to 0 (no limit)."""
    return _seconds("EPISODIC_CONNECT_TIMEOUT", 10.0) or None


def encoder_stall_timeout_s() -> float:
    """$EPISODIC_ENCODER_STALL_TIMEOUT: seconds a video encoder may go without progress (default 60)."""
    return _seconds("EPISODIC_ENCODER_STALL_TIMEOUT", 60.0) or 60.0


def retry_window_s() -> float:
    """$EPISODIC_RETRY_WINDOW: seconds after a remote read's first attempt during which transient failures
    are retried (default 30; 0: none)."""
    return _seconds("EPISODIC_RETRY_WINDOW", 30.0, hi=86400)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(value: str, name: str) -> int:
    """'123', '64M', '32G', '1.5T' (binary units, an optional trailing 'B' or 'iB') -> bytes >= 0."""
    text = value.strip().upper().removesuffix("IB").removesuffix("B")
    unit = text[-1] if text and text[-1] in "KMGT" else ""
    try:
        n = float(text[: len(text) - len(unit)]) * _UNITS[unit]
    except ValueError:
        n = -1.0
    if not 0 <= n < float(1 << 62):
        raise ValueError(f"{name} must be a number of bytes (optionally with a K/M/G/T suffix), got {value!r}")
    return int(n)


def file_cache_max_bytes() -> int:
    """$EPISODIC_CACHE_MAX_BYTES: the size of the whole-file cache of remote files (default 32 GiB)."""
    value = os.environ.get("EPISODIC_CACHE_MAX_BYTES")
    return parse_bytes(value, "EPISODIC_CACHE_MAX_BYTES") if value else 32 << 30


def _rank(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return n


def local_rank() -> int | None:
    """$LOCAL_RANK (set by torchrun, accelerate, deepspeed): this process's rank on its node; None when unset."""
    return _rank("LOCAL_RANK")


def node_name() -> str:
    """What identifies this process's node: the host name, plus torchrun's node rank ($GROUP_RANK) when set
    (several nodes may run on one host)."""
    import socket

    group = _rank("GROUP_RANK")
    host = socket.gethostname()
    return host if group is None else f"{host}#{group}"


def slurm_array_task() -> tuple[int, int] | None:
    """(this task's place, the array's number of tasks) in a SLURM job array: ($SLURM_ARRAY_TASK_ID minus
    $SLURM_ARRAY_TASK_MIN, $SLURM_ARRAY_TASK_COUNT); None outside one (`episodic fleet --shard slurm`)."""
    task, count = _rank("SLURM_ARRAY_TASK_ID"), _rank("SLURM_ARRAY_TASK_COUNT")
    if task is None or count is None:
        return None
    first = _rank("SLURM_ARRAY_TASK_MIN") or 0
    k = task - first
    if not 0 <= k < count:
        raise ValueError(
            f"SLURM_ARRAY_TASK_ID {task} is not among the {count} tasks from SLURM_ARRAY_TASK_MIN "
            f"{first}: give --shard K/N"
        )
    return k, count


def progress_allowed() -> bool:
    """False when $EPISODIC_PROGRESS is '0' (or 'false', 'no', 'off'): no progress bars at all."""
    return os.environ.get("EPISODIC_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def quiet_svt_av1() -> None:
    """SVT-AV1 prints its banner at every encoder start unless SVT_LOG says otherwise."""
    os.environ.setdefault("SVT_LOG", "1")
