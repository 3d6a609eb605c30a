"""Tabular layer: columnar frames of selected episodes and the window arithmetic shared by every mode."""

from .columns import Columns, load_columns
from .windows import delta_offsets, window_rows

__all__ = ["Columns", "delta_offsets", "load_columns", "window_rows"]
