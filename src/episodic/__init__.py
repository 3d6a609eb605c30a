"""episodic: fast, exact, resumable PyTorch loading of LeRobot-format robot datasets."""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "LeRobotDataset": "episodic.datasets",
    "EpisodicDataset": "episodic.datasets",
    "StreamingLeRobotDataset": "episodic.datasets",
    "MixtureDataset": "episodic.datasets",
    "StreamingMixtureDataset": "episodic.datasets",
    "DatasetWriter": "episodic.writer",
    "to_device": "episodic.datasets.device",
    "frames_to_float": "episodic.datasets.device",
    "EpisodeAwareSampler": "episodic.order",
    "EvalSplit": "episodic.order",
    "load_metadata": "episodic.format",
    "DatasetFormatError": "episodic.format",
    "EpisodicError": "episodic.format",
    "FetchError": "episodic.format",
    "FrameTimestampError": "episodic.format",
    "VideoDecodeError": "episodic.format",
    "UnknownTaskWarning": "episodic.format",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'episodic' has no attribute {name!r}")


__all__ = sorted(_LAZY)
