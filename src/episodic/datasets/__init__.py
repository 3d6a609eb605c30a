"""Datasets layer: map-style (native and LeRobot drop-in) and streaming, of one dataset or of a weighted mixture,
built on the shared FrameEngine."""

from .engine import FrameEngine
from .map_style import EpisodicDataset, LeRobotDataset
from .mixture import MixtureDataset
from .mixture_stream import StreamingMixtureDataset
from .streaming import StreamingLeRobotDataset, StreamingLoader

__all__ = ["EpisodicDataset", "FrameEngine", "LeRobotDataset", "MixtureDataset", "StreamingLeRobotDataset",
           "StreamingLoader", "StreamingMixtureDataset"]
