"""The one check of a file a user names as input: a regular file, of bounded size.

Owns ``file_problem`` (why a path is not a regular file) and ``read_input`` (the bytes of one,
refused in one line when it is not). Every input file the launching process reads goes through
them: ``--config``, ``data.path`` (checked only: the ranks read it), a fault trace (``--trace``
of ``mpiec bench`` and ``mpiec simulate``), ``mpiec simulate --costs`` and ``mpiec run --hostfile``.
Invariants:

* nothing is read that is not a regular file: a named pipe would block the command before any rank
  starts (forever, without a writer), a device such as ``/dev/zero`` never ends (a ``MemoryError``);
  the file is opened non-blocking and checked on its open descriptor (``fstat``), so a path swapped
  for a pipe between a check and the read cannot slip through;
* at most ``limit`` bytes (``mpiec.config.limits.MAX_INPUT_BYTES`` unless a caller says otherwise) are
  read: a larger file is refused by its size before its content is read;
* every refusal is the caller's error class with one line, ``WHAT PROBLEM`` (``config file 'x.toml'
  is a directory, not a file``), control characters escaped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mpiec.config.limits import MAX_INPUT_BYTES
from mpiec.errors import MpiecError

__all__ = ["file_problem", "one_line", "read_input"]

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def one_line(text: str) -> str:
    """A message stays one line: control characters (newline, NUL, ...) are escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _kind_problem(mode: int, noun: str) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"is a directory, not a {noun}"
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return f"is not a regular file ({kind})"


def file_problem(path: str | Path, noun: str = "file") -> str | None:
    """Why ``path`` is not a regular file (``"does not exist"``, ``"is a directory, not a NOUN"``,
    ``"is not a regular file (a named pipe)"``), or None when it is one. Follows symlinks."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return _kind_problem(mode, noun)


def read_input(path: str | Path, what: str, *, noun: str = "file", limit: int = MAX_INPUT_BYTES,
               error: type[MpiecError] = MpiecError) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; anything else raises
    ``error("WHAT PROBLEM")`` in one line (``what`` names the input: ``"trace t.json"``)."""
    try:
        # O_NONBLOCK: opening a named pipe for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(one_line(f"{what} does not exist")) from None
    except IsADirectoryError:
        raise error(one_line(f"{what} is a directory, not a {noun}")) from None
    except OSError as exc:
        raise error(one_line(f"{what} cannot be read ({exc.strerror or exc})")) from None
    try:
        st = os.fstat(fd)
        problem = _kind_problem(st.st_mode, noun)
        if problem is None and st.st_size > limit:
            problem = (f"is too large: {_size(st.st_size)}, more than the {_size(limit)} an input file "
                       "may have")
    except BaseException:
        os.close(fd)
        raise
    if problem:
        os.close(fd)
        raise error(one_line(f"{what} {problem}"))
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)  # a file that grew since fstat is still cut at the limit
        except OSError as exc:
            raise error(one_line(f"{what} cannot be read ({exc.strerror or exc})")) from None
    if len(data) > limit:
        raise error(one_line(f"{what} is too large: more than the {_size(limit)} an input file may have"))
    return data


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"
