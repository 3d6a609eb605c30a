"""Tabular layer: columnar frames of selected episodes and the window arithmetic shared by every mode."""

from .columns import Columns, load_columns
from .values import ON_UNKNOWN_TASK, UNKNOWN_TASK, UnknownTasks
from .windows import delta_offsets, window_rows

__all__ = ["ON_UNKNOWN_TASK", "UNKNOWN_TASK", "Columns", "UnknownTasks", "delta_offsets", "load_columns", "window_rows"]
