"""Weighted mixtures of many LeRobot datasets: the spec, preflight before any data is read, the order.

- `MixtureSpec` / `MixtureEntry` (`spec`): entries, weights or a weighting rule, role mappings; from objects,
  JSON/YAML files with ``$ref`` includes (`refs`), or OpenTau's mixture configs (`opentau`).
- `preflight` (`preflight`): every entry's metadata fetched in parallel and checked; every problem of every
  entry reported at once (`PreflightReport`, ``episodic mixture check SPEC``).
- `build_sampler` (`sampling`): the map-style order (`episodic.order.MixtureSampler`) of a checked mixture.
- `prepare` (`startup`): the mixture checked and every entry's files that training reads made local once per node
  (or once in all on a shared cache) on every rank of a torch.distributed group, errors raised on every rank, never
  a hang.
"""

from .checking import preflight
from .checking.report import EntryReport, PreflightReport, Problem
from .checking.spec import MixtureEntry, MixtureSpec, Weighting, load_spec
from .sampling import build_sampler
from .startup.distributed import StartupResult, prepare

__all__ = [
    "EntryReport",
    "MixtureEntry",
    "MixtureSpec",
    "PreflightReport",
    "Problem",
    "StartupResult",
    "Weighting",
    "build_sampler",
    "load_spec",
    "preflight",
    "prepare",
]
