"""Dataset text made safe for a terminal: task strings, feature names, paths and error messages come from
the dataset and may hold escape sequences (colours, cursor moves, a cleared screen, a fake prompt), line
breaks that forge output lines, or bidirectional overrides. `printable` writes those as Python escapes."""

from __future__ import annotations


def printable(text: object) -> str:
    """`str(text)` with every non-printable character (control characters including newlines and ESC,
    Unicode format characters such as bidi overrides, separators other than the space) escaped as `\\xNN` /
    `\\uNNNN`."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)
