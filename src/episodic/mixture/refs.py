"""`{"$ref": "other.json"}` includes in mixture spec files, contained in the spec's directory.

Anywhere a value is expected, an object ``{"$ref": "path"}`` is replaced by the content of that file (JSON, or
YAML for ``.yaml``/``.yml`` when PyYAML is installed); sibling keys are merged over the included object, deeply
(a sibling's value wins; objects merge, lists are replaced). A path is relative to the file that holds the
``$ref``. Every included file must resolve (symlinks included) inside the directory of the top spec file:
an absolute path, ``..`` or a symlink leading out of it is refused, so a spec cannot read files elsewhere.
Cycles, missing files, non-string ``$ref`` values and siblings next to a non-object are errors naming the file
that holds the ``$ref``. This is the include format OpenTau's configs use, so their mixtures load as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..format.errors import MixtureSpecError

__all__ = ["REF_KEY", "MAX_FILE_BYTES", "load_document", "resolve_refs"]

REF_KEY = "$ref"
MAX_FILE_BYTES = 256 << 20  # a spec file larger than this is refused before it is parsed
_MAX_DEPTH = 64


def load_document(path: Path) -> Any:
    """The parsed content of a JSON or YAML file (no includes resolved)."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise MixtureSpecError(f"{path}: cannot read ({e.strerror or e})") from None
    if size > MAX_FILE_BYTES:
        raise MixtureSpecError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} a spec file may have")
    text = path.read_bytes()
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise MixtureSpecError(f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the spec "
                                   "as JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise MixtureSpecError(f"{path}: not valid YAML ({e})") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MixtureSpecError(f"{path}: not valid JSON ({e})") from None


def _inside(target: Path, top: Path) -> bool:
    return target == top or top in target.parents


def resolve_refs(path: str | os.PathLike) -> Any:
    """The document at `path` with every ``$ref`` include resolved (see the module docstring)."""
    top_file = Path(path).resolve()
    return _file(top_file, top_file.parent, ())


def _file(path: Path, top: Path, stack: tuple[Path, ...]) -> Any:
    if path in stack:
        raise MixtureSpecError(f"{stack[-1]}: $ref cycle: " + " -> ".join(str(p) for p in (*stack, path)))
    if len(stack) >= _MAX_DEPTH:
        raise MixtureSpecError(f"{stack[-1]}: $ref includes nested deeper than {_MAX_DEPTH}")
    if not path.is_file():
        where = f"{stack[-1]}: $ref target" if stack else "mixture spec"
        raise MixtureSpecError(f"{where} {path}: file not found")
    return _node(load_document(path), path, top, (*stack, path))


def _node(node: Any, holder: Path, top: Path, stack: tuple[Path, ...]) -> Any:
    if isinstance(node, dict):
        if REF_KEY not in node:
            return {k: _node(v, holder, top, stack) for k, v in node.items()}
        ref = node[REF_KEY]
        if not isinstance(ref, str) or not ref:
            raise MixtureSpecError(f"{holder}: {REF_KEY} must be a non-empty path string, got {ref!r}")
        target = (holder.parent / ref).resolve()
        if not _inside(target, top):
            raise MixtureSpecError(f"{holder}: {REF_KEY} {ref!r} resolves to {target}, outside the spec's directory "
                                   f"{top}; includes must stay inside it")
        loaded = _file(target, top, stack)
        siblings = {k: _node(v, holder, top, stack) for k, v in node.items() if k != REF_KEY}
        if not siblings:
            return loaded
        if not isinstance(loaded, dict):
            raise MixtureSpecError(f"{holder}: keys {sorted(siblings)} next to {REF_KEY} {ref!r} need an object to "
                                   f"merge into, but it holds a {type(loaded).__name__}")
        return _merge(loaded, siblings)
    if isinstance(node, list):
        return [_node(v, holder, top, stack) for v in node]
    return node


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out
