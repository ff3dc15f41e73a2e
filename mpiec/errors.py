"""The one exception family users see.

Every error caused by bad input (config, kill plan, data file, checkpoint,
result file) is raised as a subclass of ``MpiecError`` with a one-line message
naming the problem; the CLI prints it as ``mpiec: error: <message>`` and exits
with code 2, without a traceback.
"""

from collections.abc import Iterable


class MpiecError(Exception):
    """Base of user-facing errors: the message is one line naming the problem."""


class ConfigError(MpiecError):
    """An unknown key or invalid value in a config, preset or ``--set``."""


class KillPlanError(MpiecError):
    """A malformed or impossible kill plan."""


class DataError(MpiecError):
    """A malformed data file (the message names file and line)."""


class ResultFileError(MpiecError):
    """A result file that is missing, unreadable or not of mpiec's schema."""


class CheckpointError(MpiecError):
    """A missing, truncated or mismatching checkpoint."""


def did_you_mean(key: str, names: Iterable[object]) -> str:
    """`` (did you mean 'x'?)`` for the name of ``names`` closest to a misspelt ``key``, else ""."""
    import difflib

    close = difflib.get_close_matches(key, [str(n) for n in names], n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
