"""LeRobot's own training script with episodic's datasets: `episodic lerobot-train ARGS` or
`python -m episodic.lerobot ARGS`, where ARGS are the usual `lerobot-train` arguments (see `train`).

Nothing here imports LeRobot until it runs, so episodic itself does not depend on LeRobot.
"""

from __future__ import annotations

__all__ = ["main", "make_dataset"]


def __getattr__(name: str):
    if name in __all__:
        from . import train

        return getattr(train, name)
    raise AttributeError(f"module 'episodic.lerobot' has no attribute {name!r}")
