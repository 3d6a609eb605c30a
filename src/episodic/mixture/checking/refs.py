"""`{"$ref": "other.json"}` includes in mixture spec files, contained in the spec's directory.

Anywhere a value is expected, an object ``{"$ref": "path"}`` is replaced by the content of that file (JSON, or
YAML for ``.yaml``/``.yml`` when PyYAML is installed); sibling keys are merged over the included object, deeply
(a sibling's value wins; objects merge, lists are replaced). A path is relative to the file that holds the
``$ref``. Every included file must resolve (symlinks included) inside the directory of the top spec file:
an absolute path, ``..`` or a symlink leading out of it is refused, so a spec cannot read files elsewhere.
Cycles, missing files, non-string ``$ref`` values and siblings next to a non-object are errors naming the file
that holds the ``$ref``. This is the include format OpenTau's configs use, so their mixtures load as they are.

Bounds, so that no small file can make a huge spec: a file is at most `MAX_FILE_BYTES`; the spec, includes and
YAML aliases expanded, at most `MAX_NODES` values (objects, lists and scalars, each counted as often as it
appears) and `MAX_NESTING` levels deep. Each node is resolved once and kept shared where it is repeated (a YAML
alias, a file included twice), so a 526-byte YAML of nine levels of aliases (10^9 values expanded) is refused at
once, with the bound named, instead of being rebuilt value by value. A document nested deeper than its parser
can follow is refused the same way (never a `RecursionError`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...format.errors import MixtureSpecError

__all__ = ["REF_KEY", "MAX_FILE_BYTES", "MAX_NESTING", "MAX_NODES", "load_document", "resolve_refs"]

REF_KEY = "$ref"
MAX_FILE_BYTES = 256 << 20  # a spec file larger than this is refused before it is parsed
MAX_NODES = 5_000_000  # values of the expanded spec: 200,000 entries of ten fields are 2.2 million
MAX_NESTING = 100  # levels of objects and lists (a spec needs about 6)
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
            raise MixtureSpecError(
                f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the spec as JSON"
            ) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise MixtureSpecError(f"{path}: not valid YAML ({e})") from None
        except RecursionError:
            raise _too_deep(path) from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise MixtureSpecError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise _too_deep(path) from None


def _too_deep(path: Path) -> MixtureSpecError:
    return MixtureSpecError(
        f"{path}: nested deeper than {MAX_NESTING} levels of objects and lists (a mixture spec needs a handful)"
    )


def _inside(target: Path, top: Path) -> bool:
    return target == top or top in target.parents


def resolve_refs(path: str | os.PathLike) -> Any:
    """The document at `path` with every ``$ref`` include resolved (see the module docstring)."""
    top_file = Path(path).resolve()
    return _Resolver(top_file.parent).file(top_file, (), 0)[0]


class _Resolver:
    """One resolution: every node resolved once (memoised by identity, the raw node kept alive with its result), every
    file once, with the expanded size and height of each, so repeated nodes stay shared and the bounds are checked
    without expanding anything."""

    def __init__(self, top: Path):
        self.top = top
        self.nodes: dict[int, tuple[Any, Any, int, int]] = {}  # id(raw) -> (raw, resolved, size, height)
        self.files: dict[Path, tuple[Any, int, int]] = {}  # path -> (resolved, size, height)

    def file(self, path: Path, stack: tuple[Path, ...], depth: int) -> tuple[Any, int, int]:
        if path in stack:
            raise MixtureSpecError(f"{stack[-1]}: $ref cycle: " + " -> ".join(str(p) for p in (*stack, path)))
        if len(stack) >= _MAX_DEPTH:
            raise MixtureSpecError(f"{stack[-1]}: $ref includes nested deeper than {_MAX_DEPTH}")
        done = self.files.get(path)
        if done is None:  # a file resolved before includes none of `stack` (that would have been a cycle then)
            if not path.is_file():
                where = f"{stack[-1]}: $ref target" if stack else "mixture spec"
                raise MixtureSpecError(f"{where} {path}: file not found")
            done = self.files[path] = self.node(load_document(path), path, (*stack, path), depth)
        self.check(done, path, depth)
        return done

    def check(self, done: tuple[Any, int, int], holder: Path, depth: int) -> None:
        if done[1] > MAX_NODES:
            raise MixtureSpecError(
                f"{holder}: the spec expands to {done[1]:,} values (YAML aliases and $ref includes "
                f"expanded), more than the {MAX_NODES:,} a mixture spec may have"
            )
        if depth + done[2] > MAX_NESTING:
            raise _too_deep(holder)

    def node(self, node: Any, holder: Path, stack: tuple[Path, ...], depth: int) -> tuple[Any, int, int]:
        """(resolved node, values it expands to, its height)."""
        if not isinstance(node, (dict, list)):
            return node, 1, 0
        if depth >= MAX_NESTING:
            raise _too_deep(holder)
        done: tuple[Any, int, int]  # (the resolved node, its nodes, its depth)
        held = self.nodes.get(id(node))
        if held is not None:
            done = held[1:]
            self.check(done, holder, depth)
            return done
        if isinstance(node, list):
            parts = [self.node(v, holder, stack, depth + 1) for v in node]
            done = [p[0] for p in parts], 1 + sum(p[1] for p in parts), 1 + max((p[2] for p in parts), default=0)
        elif REF_KEY not in node:
            items = {k: self.node(v, holder, stack, depth + 1) for k, v in node.items()}
            done = (
                {k: p[0] for k, p in items.items()},
                1 + sum(p[1] for p in items.values()),
                1 + max((p[2] for p in items.values()), default=0),
            )
        else:
            done = self.ref(node, holder, stack, depth)
        self.check(done, holder, depth)
        self.nodes[id(node)] = (node, *done)
        return done

    def ref(self, node: dict, holder: Path, stack: tuple[Path, ...], depth: int) -> tuple[Any, int, int]:
        ref = node[REF_KEY]
        if not isinstance(ref, str) or not ref:
            raise MixtureSpecError(f"{holder}: {REF_KEY} must be a non-empty path string, got {ref!r}")
        target = (holder.parent / ref).resolve()
        if not _inside(target, self.top):
            raise MixtureSpecError(
                f"{holder}: {REF_KEY} {ref!r} resolves to {target}, outside the spec's directory "
                f"{self.top}; includes must stay inside it"
            )
        loaded, size, height = self.file(target, stack, depth)
        siblings = {k: self.node(v, holder, stack, depth + 1) for k, v in node.items() if k != REF_KEY}
        if not siblings:
            return loaded, size, height
        if not isinstance(loaded, dict):
            raise MixtureSpecError(
                f"{holder}: keys {sorted(siblings)} next to {REF_KEY} {ref!r} need an object to "
                f"merge into, but it holds a {type(loaded).__name__}"
            )
        # a bound, not an exact count: what the siblings replace is counted too
        return (
            _merge(loaded, {k: p[0] for k, p in siblings.items()}),
            size + sum(p[1] for p in siblings.values()),
            max(height, 1 + max(p[2] for p in siblings.values())),
        )


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out
