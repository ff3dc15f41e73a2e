"""mpiec.config.inputs: every input file is a regular file of bounded size, or one line naming why not."""

from __future__ import annotations

import os

import pytest

from mpiec.config import ConfigError, read_toml
from mpiec.config.inputs import file_problem, read_input
from mpiec.config.limits import MAX_INPUT_BYTES
from mpiec.errors import DataError, MpiecError
from mpiec.failures.traces import load_trace
from mpiec.launch.launcher import read_hostfile
from mpiec.simulate.costs import load_costs

# every reader of an input file, with the error class it raises and how it names the input
READERS = [
    (lambda p: read_toml(p), ConfigError, "config file"),
    (lambda p: load_trace(p), DataError, "trace"),
    (lambda p: load_costs(p), MpiecError, "costs file"),
    (lambda p: read_hostfile(p), MpiecError, "--hostfile"),
]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("read, error, what", READERS)
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(fifo, read, error, what):
    # Before: open() of a pipe without a writer blocked forever (pytest-timeout ends the test).
    with pytest.raises(error, match=rf"^{what} \S*pipe\.toml'? is not a regular file \(a named pipe\)$"):
        read(fifo)


@pytest.mark.parametrize("read, error, what", READERS)
def test_a_device_is_refused_before_it_is_read(read, error, what):
    # Before: /dev/zero was read until a MemoryError.
    with pytest.raises(error, match=r"/dev/zero'? is not a regular file \(a character device\)$"):
        read("/dev/zero")


@pytest.mark.parametrize("read, error, what", READERS)
def test_a_file_above_the_cap_is_refused_by_its_size(tmp_path, read, error, what):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 1)  # sparse: nothing is written, nothing need be read
    with pytest.raises(error, match=r"is too large: 64\.0 MiB, more than the 64\.0 MiB"):
        read(big)


def test_missing_directory_and_unreadable(tmp_path):
    with pytest.raises(MpiecError, match=r"^x .*nope does not exist$"):
        read_input(tmp_path / "nope", "x " + str(tmp_path / "nope"))
    with pytest.raises(MpiecError, match=r"^x is a directory, not a trace file$"):
        read_input(tmp_path, "x", noun="trace file")
    f = tmp_path / "small"
    f.write_bytes(b"0123456789")
    assert read_input(f, "x") == b"0123456789"
    with pytest.raises(MpiecError, match="is too large: 10 bytes, more than the 4 bytes"):
        read_input(f, "x", limit=4)


def test_file_problem_names_the_kind(tmp_path, fifo):
    assert file_problem(tmp_path / "f") == "does not exist"
    assert file_problem(tmp_path, "data file") == "is a directory, not a data file"
    assert file_problem(fifo) == "is not a regular file (a named pipe)"
    (tmp_path / "f").write_text("x")
    assert file_problem(tmp_path / "f") is None
