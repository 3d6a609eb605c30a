"""Datasets layer: map-style (native and LeRobot drop-in) and streaming, built on the shared FrameEngine."""

from .engine import FrameEngine
from .map_style import EpisodicDataset, LeRobotDataset
from .streaming import StreamingLeRobotDataset, StreamingLoader

__all__ = ["EpisodicDataset", "FrameEngine", "LeRobotDataset", "StreamingLeRobotDataset", "StreamingLoader"]
