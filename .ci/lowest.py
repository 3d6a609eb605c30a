"""Print pip constraints pinning every dependency of pyproject.toml to its declared lower bound ("numpy>=1.26"
-> "numpy==1.26"), except those named on the command line.
.ci/run installs the package with these constraints and runs the suite, so the lower bounds we declare are
the versions we test."""

import re
import sys
import tomllib
from pathlib import Path

skip = {a.lower() for a in sys.argv[1:]}
project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
for req in project["dependencies"]:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*(,.*)?", req)
    if m is None:
        sys.exit(f"pyproject.toml: dependency {req!r} has no '>=' lower bound")
    if m.group(1).lower() not in skip:
        print(f"{m.group(1)}=={m.group(3)}")
