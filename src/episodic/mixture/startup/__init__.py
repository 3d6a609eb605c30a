"""The distributed start-up of a mixture (`prepare`): the mixture checked and every entry's files that training
reads made local once per node, errors raised on every rank, never a hang. `team`: who downloads for whom and the
time-limited collectives; `downloads`: one node's plan and fetches; `handover`: the checked report handed to the
other ranks; `outcomes`: what the ranks tell each other; `files`: which files of an entry training reads."""

from .distributed import StartupResult, prepare

__all__ = ["StartupResult", "prepare"]
