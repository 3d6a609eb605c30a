"""Process facts and process-wide effects, all in this one module.

- Which process this is: the main process or a DataLoader worker (`worker`, `in_worker`, `slot`), and how
  many cores it may use (`usable_cores`, `decode_threads`).
- Fork safety, one mechanism: objects that hold per-process resources (open decoders, thread pools, locks,
  counters) register with `after_fork(obj)`; `os.register_at_fork` calls their `_after_fork()` in a forked
  child before anything else runs there. Nothing else in episodic compares pids. The same hook gives an old
  fsspec (< 2025.5, which does not do it itself) a fresh event loop in the child.
- No fork with live threads of ours: a thread of the parent that holds a lock at the fork leaves it locked
  forever in the child (Python >= 3.12 warns "This process is multi-threaded, use of fork() may lead to
  deadlocks"). Objects that own threads register with `stop_threads_at_fork(obj)`: their `_before_fork()`
  stops and joins them before every fork, `_after_fork_parent()` lets the parent go on (a pool starts its
  threads again when next used). fsspec's event-loop thread (remote filesystems) is paused the same way: the
  loop stops and its thread is joined before the fork, and the same loop runs on a new thread in the parent
  after it (open sessions and pending calls carry on; the child makes its own loop). Threads that are not
  episodic's are left alone: pyarrow's jemalloc background thread (jemalloc's own fork handlers take its locks
  around a fork), the OpenMP threads of torch's intra-op pool after a parallel op in the parent (idle between
  ops), and torch's and multiprocessing's threads (a DataLoader's pin-memory or queue feeder threads).
- Workers that share tensors through the file system (`set_tensor_sharing`) start a `torch_shm_manager`
  process, fork + exec of the worker: it would inherit every inheritable descriptor of a spawned (or
  forkserver) worker, among them the write end of multiprocessing's resource-tracker pipe and of the worker's
  sentinel pipe, and it lives as long as any process (the main one too) holds tensors it shares. The main
  process then waits for ever at exit on Python >= 3.13 (its resource tracker never sees end-of-file), and 5
  s per worker at every shutdown of spawned workers (the sentinel never fires). So a process that switches
  to the file system marks its descriptors close-on-exec first (`_keep_descriptors_from_exec`).
- Everything that touches torch's private API lives here and nowhere else, each with the reason:
  `register_collate` (torch's `default_collate` dispatch table, `torch.utils.data._utils.collate`; torch has
  no public way to teach `default_collate` a new type), `shutdown_workers` (a DataLoader iterator's
  `_shutdown_workers`: the only way to stop workers now rather than at garbage collection), and
  `stop_workers_at_exit` (the same for every DataLoader iterator still alive when the interpreter exits:
  left to torch's own teardown, a worker that shares tensors through the file system dies with
  "terminate called after throwing an instance of 'std::system_error' what(): Broken pipe"),
  `storage_use_count` (`torch._C._storage_Use_Count`: how many tensors hold a storage, the only way to know
  that a recycled frame buffer is free; None where this torch lacks it, and the frame pool then recycles
  nothing), and `default_store` (the key-value store of torch.distributed's default process group,
  `distributed_c10d._get_default_store`: a mixture start-up meets its ranks there under a prefix of its own, which
  `new_group` cannot give). tests/test_runtime.py checks that no other module of `src/` names a private torch API.
- The tensor-sharing strategy of DataLoader workers (`set_tensor_sharing`), chosen by the loader that
  starts them.

torch is imported lazily: the layers below `datasets/` import this module without importing torch.
Environment variables are read in `episodic.config`, not here.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import config

__all__ = [
    "worker",
    "in_worker",
    "slot",
    "usable_cores",
    "decode_threads",
    "after_fork",
    "keep_inherited",
    "stop_threads_at_fork",
    "register_collate",
    "shutdown_workers",
    "stop_workers_at_exit",
    "storage_use_count",
    "set_tensor_sharing",
    "default_store",
    "MAX_SLOTS",
]

MAX_SLOTS = 65  # per-process counter slots: the main process, then up to 64 DataLoader workers (wrapping)


# ---------------------------------------------------------------------------------------------- facts
def worker() -> tuple[int, int] | None:
    """(worker id, number of workers) in a DataLoader worker, else None. Never imports torch: a process
    that has not imported it is not a DataLoader worker."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    info = data.get_worker_info()
    return None if info is None else (int(info.id), int(info.num_workers))


def in_worker() -> bool:
    """True inside a DataLoader worker."""
    return worker() is not None


def slot() -> int:
    """This process's counter slot: 0 in the main process, 1 + worker id in a DataLoader worker."""
    w = worker()
    return 0 if w is None else 1 + w[0] % (MAX_SLOTS - 1)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_memory() -> int:
    """Bytes of memory this process's machine (or its container: the cgroup's limit, v2 or v1) has in all; 0
    where the OS does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def loading_processes() -> int:
    """How many processes on this machine load data alongside this one, itself included: this DataLoader's
    workers (1 outside a worker) times the ranks on the node ($LOCAL_WORLD_SIZE, as torchrun sets it)."""
    w = worker()
    try:
        ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        ranks = 1
    return (w[1] if w is not None else 1) * ranks


def decode_threads() -> int:
    """Decode threads for this process: its share of the cores (a DataLoader worker gets cores /
    num_workers), at least 1, at most 8; $EPISODIC_DECODE_THREADS overrides."""
    override = config.decode_threads_override()
    if override is not None:
        return override
    w = worker()
    return max(1, min(8, usable_cores() // (w[1] if w is not None else 1)))


# ---------------------------------------------------------------------------------------------- fork safety
_FORK_HOOKS: weakref.WeakSet[Any] = weakref.WeakSet()


def after_fork(obj: Any) -> Any:
    """Call `obj._after_fork()` in every forked child (while `obj` lives); returns `obj`."""
    _FORK_HOOKS.add(obj)
    return obj


_INHERITED: list = []  # a forked child's references to its parent's native objects: never freed there


def keep_inherited(*objs: Any) -> None:
    """In a forked child (from an `_after_fork`): keep `objs`, the parent's objects whose native state belongs
    to the parent (FFmpeg codec contexts, NVDEC sessions, CUDA memory), alive until the child exits, so that it
    never runs their destructors. Freeing an NVDEC session in a forked child calls into CUDA there, which
    crashes it (seen on an H100: a DataLoader worker killed by SIGSEGV); a worker exits with `os._exit`, which
    frees nothing."""
    _INHERITED.extend(objs)


def _reset_fsspec_loop() -> None:
    """fsspec < 2025.5 keeps its parent's event loop in a forked child, where the loop's thread no longer
    runs: every synchronous call of an async filesystem (HTTP, S3, ...) would wait forever. Newer fsspec
    resets it itself (`fsspec.asyn.reset_after_fork`); for older ones, do what that does."""
    asyn = sys.modules.get("fsspec.asyn")
    if asyn is not None and not hasattr(asyn, "reset_after_fork") and hasattr(asyn, "reset_lock"):
        asyn.reset_lock()


def _run_fork_hooks() -> None:
    _reset_fsspec_loop()
    for obj in list(_FORK_HOOKS):
        obj._after_fork()


_THREAD_OWNERS: weakref.WeakSet[Any] = weakref.WeakSet()
_STOPPED: list = []  # the owners stopped for the fork under way (strong references until the parent goes on)


def stop_threads_at_fork(obj: Any) -> Any:
    """Call `obj._before_fork()` (stop and join its threads) in a process about to fork, and
    `obj._after_fork_parent()` in it after the fork (while `obj` lives); returns `obj`. The child gets the
    `after_fork` hook, where `obj` registered it."""
    _THREAD_OWNERS.add(obj)
    return obj


class _FsspecLoopPause:
    """fsspec's event loop (one per process, on its daemon thread "fsspecIO", started by the first call of an
    async filesystem) stopped and its thread joined before a fork; the same loop run again on a new thread in
    the parent after it."""

    JOIN_S = 10.0  # a loop stops after the callbacks of its current pass: a stuck one is not ours to break

    def __init__(self):
        self.loop = None

    def before(self) -> None:
        asyn = sys.modules.get("fsspec.asyn")
        loops, threads = getattr(asyn, "loop", None), getattr(asyn, "iothread", None)
        if not (isinstance(loops, list) and isinstance(threads, list) and loops and threads):
            return
        loop, thread = loops[0], threads[0]
        if (
            loop is None
            or thread is None
            or not thread.is_alive()
            or loop.is_closed()
            or thread is threading.current_thread()
        ):
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:  # closed meanwhile
            return
        thread.join(self.JOIN_S)
        if not thread.is_alive():
            self.loop = loop

    def after_in_parent(self) -> None:
        loop, self.loop = self.loop, None
        asyn = sys.modules.get("fsspec.asyn")
        if loop is None or asyn is None or asyn.loop[0] is not loop:
            return
        thread = threading.Thread(target=loop.run_forever, name="fsspecIO", daemon=True)
        thread.start()
        asyn.iothread[0] = thread


_FSSPEC_PAUSE = _FsspecLoopPause()


def _before_fork() -> None:
    _STOPPED[:] = list(_THREAD_OWNERS)
    for obj in _STOPPED:
        obj._before_fork()
    _FSSPEC_PAUSE.before()


def _after_fork_in_parent() -> None:
    _FSSPEC_PAUSE.after_in_parent()
    owners, _STOPPED[:] = list(_STOPPED), []
    for obj in owners:
        obj._after_fork_parent()


def _after_fork_in_child() -> None:
    _STOPPED.clear()
    _FSSPEC_PAUSE.loop = None
    _run_fork_hooks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------------------------- torch
def register_collate(cls: type, fn: Callable) -> None:
    """Teach torch's `default_collate` to collate `cls` with `fn` (once; later calls change nothing).
    Raises RuntimeError when torch no longer has the table, so a torch upgrade that moves it fails loudly
    (tests/test_runtime.py) instead of silently collating item by item."""
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError as e:  # pragma: no cover - depends on the torch version
        raise RuntimeError(
            "torch.utils.data._utils.collate.default_collate_fn_map is gone: episodic's batch "
            "collation needs updating for this torch"
        ) from e
    default_collate_fn_map.setdefault(cls, fn)


def collate_plain(batch: Any, collate_fn_map: dict | None = None) -> Any:
    """torch's own recursive collate (what default_collate runs), for items that are not one whole batch."""
    from torch.utils.data._utils.collate import collate

    return collate(batch, collate_fn_map=collate_fn_map)


def shutdown_workers(iterator: Any) -> None:
    """Stop a DataLoader iterator's workers now (also a generator: close it). No-op for anything else."""
    stop = getattr(iterator, "_shutdown_workers", None) or getattr(iterator, "close", None)
    if stop is not None:
        stop()


_EXIT_HOOK: list = []


def stop_workers_at_exit() -> None:
    """Once per process (the main one): at interpreter exit, stop the workers of every DataLoader iterator
    still alive, while the interpreter still runs normally. Registered after torch.utils.data, so it runs
    before torch's own exit flag is set (atexit runs last-registered first)."""
    if _EXIT_HOOK or in_worker():
        return
    import atexit

    import torch.utils.data  # noqa: F401 -- its atexit hook first, so ours runs before it

    atexit.register(_stop_live_workers)
    _EXIT_HOOK.append(True)


def _stop_live_workers() -> None:
    import gc

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    # an exception that ends the interpreter (printed already) keeps its frames, and the batches they hold,
    # until after the workers are gone: drop it now, while their shared-memory manager can still free them
    sys.last_type = sys.last_value = sys.last_traceback = None
    if hasattr(sys, "last_exc"):
        sys.last_exc = None
    gc.collect()
    for obj in gc.get_objects():
        if issubclass(type(obj), _MultiProcessingDataLoaderIter):  # type(): no __class__ property runs
            try:
                obj._shutdown_workers()
            except Exception:  # noqa: BLE001 -- exiting anyway; nothing left to report to
                pass


_USE_COUNT: list = []  # [torch's storage use count function, or None], looked up once


def storage_use_count(storage: Any) -> int | None:
    """How many tensors (views included) hold `storage` (a torch UntypedStorage): torch's private
    `torch._C._storage_Use_Count` on the storage's C handle. None when this torch has neither (checked, not
    assumed: a torch without them makes callers fall back, not fail)."""
    if not _USE_COUNT:
        import torch

        _USE_COUNT.append(getattr(torch._C, "_storage_Use_Count", None))
    fn, cdata = _USE_COUNT[0], getattr(storage, "_cdata", None)
    return None if fn is None or cdata is None else int(fn(cdata))


def set_tensor_sharing(strategy: str) -> None:
    """Set this process's torch tensor-sharing strategy ('file_system' or 'file_descriptor'). Before the file
    system, this process's descriptors are made close-on-exec (`_keep_descriptors_from_exec`)."""
    if strategy not in config.SHARING_STRATEGIES:
        raise ValueError(f"sharing must be one of {config.SHARING_STRATEGIES}, got {strategy!r}")
    import torch.multiprocessing

    if torch.multiprocessing.get_sharing_strategy() != strategy:
        if strategy == "file_system":
            _keep_descriptors_from_exec()
        torch.multiprocessing.set_sharing_strategy(strategy)


def _keep_descriptors_from_exec() -> None:
    """Mark every inheritable descriptor of this process above stderr close-on-exec, so that no program it
    starts with fork + exec inherits one by accident: torch's `torch_shm_manager` (started by the first tensor
    shared through the file system) would otherwise hold a spawned worker's end of the resource-tracker and
    sentinel pipes for as long as it lives (see the module's docstring). The process itself keeps them; what
    Python starts on purpose (multiprocessing, subprocess) passes its descriptors explicitly (`pass_fds`)."""
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        fds = [int(name) for name in os.listdir(folder)]
    except OSError:  # pragma: no cover - no descriptor listing on this OS
        return
    for fd in fds:
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
            except OSError:  # the listing's own descriptor, closed by now
                pass


def default_store() -> Any:
    """The key-value store of torch.distributed's default process group (it must be initialised). Raises
    RuntimeError when torch no longer has `_get_default_store`, so a torch upgrade that moves it fails loudly
    (tests/test_runtime.py). torch.distributed's `new_group` names a group made with
    ``use_local_synchronization=True`` after its ranks alone, so a second group on the same ranks reads the first
    one's addresses from the store; a start-up needs a prefix of its own, hence the store itself."""
    from torch.distributed import distributed_c10d

    get = getattr(distributed_c10d, "_get_default_store", None)
    if get is None:  # pragma: no cover - depends on the torch version
        raise RuntimeError(
            "torch.distributed.distributed_c10d._get_default_store is gone: episodic's mixture "
            "start-up needs updating for this torch"
        )
    return get()
