"""Datasets layer: map-style (native and LeRobot drop-in) and streaming, of one dataset or of a weighted mixture,
all built by one item builder (`gather`, over the item table of `item_layout`)."""

from .loader import StreamingLoader
from .map_style import EpisodicDataset, LeRobotDataset
from .mixture import MixtureDataset
from .streaming import StreamingDataset, StreamingLeRobotDataset
from .streaming_mixture import StreamingMixtureDataset

__all__ = [
    "EpisodicDataset",
    "LeRobotDataset",
    "MixtureDataset",
    "StreamingDataset",
    "StreamingLeRobotDataset",
    "StreamingLoader",
    "StreamingMixtureDataset",
]
