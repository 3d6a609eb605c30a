"""Data generators for tests and benchmarks (`synthetic`: many tiny heterogeneous datasets and mixture specs).
No module of the library imports this package."""
