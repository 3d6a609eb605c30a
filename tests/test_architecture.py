"""The structure the code promises (docs/architecture.md), checked on the source: no module uses another
module's private names; no two modules share a basename; the names docs and docstrings cite exist."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from support import REPO

SRC = REPO / "src" / "episodic"
MODULES = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, level: int, here: str, is_package: bool) -> str:
    if not level:
        return module
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[str]:
    """Where module `path` uses a private name of another episodic module: `from .x import _y`, or `x._y` with
    `x` an imported episodic module."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path)
    is_package = path.name == "__init__.py"
    modules: dict[str, str] = {}  # local name -> episodic module
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(node.module or "", node.level, here, is_package)
            if not source.startswith("episodic"):
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if importlib.util.find_spec(full.split(".")[0]) and _is_module(full):
                    modules[alias.asname or alias.name] = full
                elif _private(alias.name) and source != here:
                    out.append(f"{path.relative_to(REPO)}:{node.lineno}: from {source} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("episodic"):
                    modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and modules[node.value.id] != here
        ):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").exists() or (SRC / rel / "__init__.py").exists()


def test_no_module_uses_another_modules_private_names():
    found = [u for p in MODULES for u in private_uses(p)]
    assert not found, "\n".join(found)


def test_the_private_name_check_can_fail(tmp_path):
    bad = SRC / "_probe_private_use.py"
    bad.write_text("from .mixture.spec import _seq\nfrom . import runtime\nx = runtime._FORK_HOOKS\n")
    try:
        assert len(private_uses(bad)) == 2
    finally:
        bad.unlink()


def test_module_basenames_are_unique():
    names: dict[str, list[str]] = {}
    for p in MODULES:
        if p.name != "__init__.py":
            names.setdefault(p.name, []).append(str(p.relative_to(SRC)))
    assert not {k: v for k, v in names.items() if len(v) > 1}


# ---------------------------------------------------------------------------------------------- cited names
_CITED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
_PACKAGES = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()} - {"lerobot"}  # LeRobot's own names
# basenames also used for objects in the prose (`layout.entries`: a MixtureLayout's field), and file names
_AMBIGUOUS = {
    "layout",
    "sampler",
    "loader",
    "metadata",
    "info",
    "files",
    "counters",
    "batch_sampler",
    "source",
    "spec",
    "state",
    "report",
    "options",
    "stats",
    "config",
    "frames",
    "fetch",
    "video",
    "lerobot",
    "team",
    "cache",
    "opentau",
}


def _known() -> tuple[dict[str, str], dict[str, type]]:
    """Module basenames that name one module only, and the classes episodic defines (name -> class)."""
    names: dict[str, list[str]] = {}
    classes: dict[str, type] = {}
    for p in MODULES:
        name = _module_name(p)
        names.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, (name, node.name))
    basenames = {b: m[0] for b, m in names.items() if len(m) == 1 and b not in _AMBIGUOUS}
    return basenames, classes


def _resolve_dotted(parts: list[str]) -> tuple[object, int]:
    """The deepest episodic module `parts` start with (from the package), and how many parts that took."""
    obj, used = importlib.import_module("episodic"), 0
    while used < len(parts) and _is_module(".".join(["episodic", *parts[: used + 1]])):
        used += 1
        obj = importlib.import_module(".".join(["episodic", *parts[:used]]))
    return obj, used


def cited_problems(text: str, where: str, known=None) -> list[str]:
    """Backticked dotted names in `text` that name something of episodic's and do not exist: a path from the
    package (`order.stream_plan.consumer_plan`, `episodic.video.output`), a module by its basename
    (`collate.to_torch`), or a class's member (`FrameEngine.batch`)."""
    basenames, classes = known or _known()
    out = []
    for m in _CITED.finditer(text):
        parts = m.group(1).split(".")
        if parts[0] == "episodic":
            parts = parts[1:]
        if not parts or parts[-1] == "py":
            continue
        if parts[0] in _PACKAGES:
            obj, used = _resolve_dotted(parts)
            if used < min(2, len(parts)):  # `video.height`: an info.json field, not one of episodic's modules
                continue
        elif parts[0] in basenames:
            obj, used = importlib.import_module(basenames[parts[0]]), 1
        elif parts[0] in classes:
            module, name = classes[parts[0]]
            obj, used = getattr(importlib.import_module(module), name), 1
        else:
            continue
        for i, part in enumerate(parts[used:], used):
            if hasattr(obj, part):
                obj = getattr(obj, part)
                continue
            # attributes set in __init__ (instance fields) are not on the class: look for "self.<part>"
            if isinstance(obj, type) and re.search(
                rf"self\.{part}\b", Path(importlib.import_module(obj.__module__).__file__).read_text()
            ):
                break
            out.append(f"{where}: `{m.group(1)}`: no {part!r} in {'.'.join(parts[:i])}")
            break
    return out


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _docs(), ids=lambda p: p.name)
def test_docs_cite_names_that_exist(path):
    problems = cited_problems(path.read_text(), path.name)
    assert not problems, "\n".join(problems)


def test_docstrings_cite_names_that_exist():
    known = _known()
    problems = []
    for p in MODULES:
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    problems += cited_problems(doc, f"{p.relative_to(REPO)}:{getattr(node, 'lineno', 1)}", known)
    assert not problems, "\n".join(problems)


def test_the_cited_name_check_can_fail():
    text = (
        "see `collate.to_torch`, `runtime.after_fork`, `datasets.gather.gather`, `order.stream_plan.nothing`, "
        "`EpisodicDataset.engine`, `EpisodicDataset.loader`, `EpisodicDataset.rows`, `FrameEngine.batch`"
    )
    assert cited_problems(text, "x") == [
        "x: `collate.to_torch`: no 'to_torch' in collate",
        "x: `order.stream_plan.nothing`: no 'nothing' in order.stream_plan",
        "x: `EpisodicDataset.engine`: no 'engine' in EpisodicDataset",
    ]
