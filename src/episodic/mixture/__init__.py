"""Weighted mixtures of many LeRobot datasets: the spec, preflight before any data is read, the order.

- `MixtureSpec` / `MixtureEntry` (`spec`): entries, weights or a weighting rule, role mappings; from objects,
  JSON/YAML files with ``$ref`` includes (`refs`), or OpenTau's mixture configs (`opentau`).
- `preflight` (`preflight`): every entry's metadata fetched in parallel and checked; every problem of every
  entry reported at once (`PreflightReport`, ``episodic mixture check SPEC``).
- `build_sampler` (`sampling`): the map-style order (`episodic.order.MixtureSampler`) of a checked mixture.
"""

from .preflight import preflight
from .report import EntryReport, PreflightReport, Problem
from .sampling import build_sampler
from .spec import MixtureEntry, MixtureSpec, Weighting, load_spec

__all__ = ["EntryReport", "MixtureEntry", "MixtureSpec", "PreflightReport", "Problem", "Weighting", "build_sampler",
           "load_spec", "preflight"]
