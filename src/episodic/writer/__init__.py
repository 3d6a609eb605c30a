"""Writer: create LeRobot v3.0 datasets (parquet + mp4) from episodes of arrays and frames."""

from .dataset_writer import DatasetWriter

__all__ = ["DatasetWriter"]
