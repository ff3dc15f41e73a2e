"""Crash notes (``mpiec.failures.crashes``): written atomically, found by the monitor and the launcher,
one line."""

from __future__ import annotations

from pathlib import Path

from mpiec.failures.crashes import (
    crash_line,
    crash_notes_dir,
    exception_text,
    notes_beside,
    remove_crash_notes,
    run_crash_notes,
    write_crash_note,
)


def test_a_note_names_the_rank_slot_step_and_error_in_one_line(tmp_path: Path):
    out = tmp_path / "run.h5"
    try:
        raise OverflowError("timestamp out of range\nfor platform time_t")
    except OverflowError as exc:
        write_crash_note(out, "0123456789ab", 3, "server:0", exc, step=10)
    notes = run_crash_notes(out, "0123456789ab")
    assert crash_line(notes) == ("rank 3 (server:0) at step 10 died of an exception: OverflowError: "
                                 "timestamp out of range for platform time_t")
    assert notes_beside(out) == notes and notes_beside(tmp_path / "other.h5") == []
    assert not list(crash_notes_dir(out, "0123456789ab").glob(".*"))  # no temporary file left
    remove_crash_notes(out)
    assert notes_beside(out) == [] and list(tmp_path.iterdir()) == []


def test_a_long_message_is_cut_and_an_unwritable_place_raises_nothing(tmp_path: Path):
    assert len(exception_text(ValueError("x" * 5000))) < 400
    assert exception_text(KeyError()) == "KeyError"
    blocker = tmp_path / "file"
    blocker.write_text("")
    write_crash_note(blocker / "run.h5", "", 0, "monitor:0", RuntimeError("boom"))  # parent is a file
    assert crash_line([]) == ""
