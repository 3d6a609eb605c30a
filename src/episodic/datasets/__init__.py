"""Datasets layer: map-style (native and LeRobot drop-in), built on the shared FrameEngine."""

from .engine import FrameEngine
from .map_style import EpisodicDataset, LeRobotDataset

__all__ = ["EpisodicDataset", "FrameEngine", "LeRobotDataset"]
