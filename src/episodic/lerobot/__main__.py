"""`python -m episodic.lerobot ARGS`: LeRobot's `lerobot-train` with episodic's datasets (see `train`)."""

import sys

from .train import main

if __name__ == "__main__":
    sys.exit(main())
