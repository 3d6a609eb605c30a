"""Tools layer: inspection, validation, benchmarking and the command line."""
