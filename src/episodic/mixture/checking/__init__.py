"""A mixture spec and its check before any data is read: the spec (`spec`, `refs` includes, OpenTau's configs in
`opentau`), every entry's source opened and metadata read (`entry_sources`), each entry checked (`entry_checks`),
the weights (`weights`) and the report of it all (`report`), in that order by `preflight` (`run`)."""

from .run import preflight

__all__ = ["preflight"]
