"""runtime.py: process facts, fork hooks and the one place that uses torch's private API."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from episodic import runtime
from episodic.datasets.collate import Item, collate_items


def test_collate_is_registered_in_torchs_table():
    # fails loudly if torch moves or renames the table default_collate dispatches on
    from torch.utils.data._utils.collate import default_collate_fn_map

    assert default_collate_fn_map.get(Item) is collate_items


def test_layers_below_datasets_do_not_import_torch():
    code = (
        "import sys, episodic.runtime, episodic.config, episodic.counters, episodic.format, episodic.order, "
        "episodic.storage; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_main_process_facts():
    assert runtime.worker() is None and not runtime.in_worker() and runtime.slot() == 0
    assert 1 <= runtime.decode_threads() <= 8


def test_decode_threads_override_is_validated(monkeypatch):
    monkeypatch.setenv("EPISODIC_DECODE_THREADS", "3")
    assert runtime.decode_threads() == 3
    monkeypatch.setenv("EPISODIC_DECODE_THREADS", "0")
    with pytest.raises(ValueError, match="EPISODIC_DECODE_THREADS must be a positive integer, got '0'"):
        runtime.decode_threads()


class _Probe:
    def __init__(self):
        self.forked = False

    def _after_fork(self):
        self.forked = True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_after_fork_hooks_run_in_the_child_only():
    probe = runtime.after_fork(_Probe())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report what the hook did, then leave at once
        os.write(w, b"1" if probe.forked else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert not probe.forked


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_can_use_fsspec_http(tmp_path):
    # With fsspec < 2025.5 the child inherits the parent's event loop without its thread: without the fork
    # hook's reset, the child's first HTTP read waits forever (the child is killed after 20 s here).
    import functools
    import http.server
    import threading

    import fsspec

    (tmp_path / "f.bin").write_bytes(b"payload")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/f.bin"
    try:
        assert fsspec.filesystem("http", skip_instance_cache=True).cat(url) == b"payload"  # the loop runs now
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.write(w, fsspec.filesystem("http", skip_instance_cache=True).cat(url))
            finally:
                os._exit(0)
        os.close(w)
        import select

        ready, _, _ = select.select([r], [], [], 20)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        assert ready and os.read(r, 100) == b"payload", "the forked child's HTTP read hung"
    finally:
        server.shutdown()


class _Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        w = runtime.worker()
        return torch.tensor([i, -1 if w is None else w[0], runtime.slot()])


def test_worker_facts_inside_dataloader_workers():
    rows = torch.cat(list(torch.utils.data.DataLoader(_Numbers(), batch_size=2, num_workers=2)))
    assert sorted(rows[:, 1].tolist()) == [0, 0, 1, 1]
    assert (rows[:, 2] == rows[:, 1] + 1).all()


def test_set_tensor_sharing_rejects_unknown_strategies():
    with pytest.raises(ValueError, match="sharing must be one of"):
        runtime.set_tensor_sharing("shm")


# ---------------------------------------------------------------------------------------------- private torch API
_SRC = os.path.join(os.path.dirname(__file__), os.pardir, "src", "episodic")
_PRIVATE = [
    r"\btorch(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*",  # torch._C, torch.utils.data._utils, torch._dynamo ...
    r"\bfrom\s+torch[\w.]*\s+import\s+[^\n]*\b_[A-Za-z]\w*",  # from torch.utils.data.dataloader import _Multi...
    r"\._cdata\b",
    r"_storage_Use_Count",
    r"_MultiProcessingDataLoaderIter",  # torch internals by their names
    r"\._shutdown_workers\b",
    r"[\"']_shutdown_workers[\"']",  # a DataLoader iterator's private method
]


def test_private_torch_api_is_used_in_runtime_only():
    import re

    pattern = re.compile("|".join(_PRIVATE))
    found = []
    for folder, _, files in os.walk(_SRC):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or os.path.samefile(path, runtime.__file__):
                continue
            with open(path, encoding="utf-8") as f:
                found += [
                    f"{os.path.relpath(path, _SRC)}:{n}: {line.strip()}"
                    for n, line in enumerate(f, 1)
                    if pattern.search(line)
                ]
    assert not found, "private torch API outside runtime.py:\n" + "\n".join(found)


def test_private_api_pattern_catches_what_it_must():
    import re

    pattern = re.compile("|".join(_PRIVATE))
    for line in (
        'getattr(torch._C, "_storage_Use_Count", None)',
        "from torch.utils.data._utils.collate import x",
        "from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter",
        "fn(s._cdata)",
        "it._shutdown_workers()",
        'getattr(it, "_shutdown_workers", None)',
        "import torch._dynamo",
    ):
        assert pattern.search(line), line
    for line in (
        "torch.utils.data.DataLoader(ds)",
        "def _shutdown_workers(self):",
        "torch.__version__",
        "x.untyped_storage().data_ptr()",
    ):
        assert not pattern.search(line), line


def test_storage_use_count_counts_tensors_on_a_storage():
    t = torch.empty(8)
    alone = runtime.storage_use_count(t.untyped_storage())
    if alone is None:
        pytest.skip("this torch has no storage use count")
    view = t[2:]
    assert runtime.storage_use_count(t.untyped_storage()) == alone + 1
    del view
    assert runtime.storage_use_count(t.untyped_storage()) == alone


def test_without_torchs_storage_use_count_the_frame_pool_falls_back_to_fresh_buffers():
    # a torch without the private function: runtime says so (None), the pool recycles nothing and still works
    code = """if True:
        import numpy as np, torch
        if hasattr(torch._C, "_storage_Use_Count"):
            del torch._C._storage_Use_Count
        from episodic import runtime
        from episodic.datasets.memory import POOL, Empty, FramePool
        assert runtime.storage_use_count(torch.empty(4).untyped_storage()) is None
        assert not FramePool().enabled and not POOL.enabled
        shape = (4, 3, 256, 256)
        (a,) = POOL.take([Empty(shape, np.dtype(np.float32))])
        ptr = a.untyped_storage().data_ptr()
        a.fill_(1.0)
        del a
        (b,) = POOL.take([Empty(shape, np.dtype(np.float32))])
        assert tuple(b.shape) == shape and b.dtype == torch.float32 and POOL.kept_bytes() == 0
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_default_store_is_the_default_groups_store(tmp_path):
    # fails loudly if torch moves or renames _get_default_store (the mixture start-up meets its ranks there)
    import torch.distributed as dist

    with pytest.raises(Exception):  # noqa: B017 -- no default group yet: torch's own error
        runtime.default_store()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        store = runtime.default_store()
        store.set("episodic-test", "x")
        assert store.get("episodic-test") == b"x"
    finally:
        dist.destroy_process_group()
