"""Writer: create LeRobot v3.0 datasets (parquet + mp4) from episodes of arrays and frames, crash-safe."""

from .dataset_writer import DatasetWriter, Recovery

__all__ = ["DatasetWriter", "Recovery"]
