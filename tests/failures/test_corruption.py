"""Silent corruption plans (``flip:``): the syntax of docs/running.md "Silent corruption", validated
like kills; a flip's placement reproducible; the flip itself exact (one bit, recorded before/after)."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mpiec.errors import KillPlanError
from mpiec.failures.corruption import (
    Corrupter,
    Flip,
    describe,
    flip_bit,
    notes_dir,
    parse_flips,
    place,
    read_notes,
)
from mpiec.failures.faults import parse_kill_plans
from mpiec.launch.resolve import load_config
from mpiec.layout import Slot, table_offsets


@pytest.fixture
def cfg():
    return load_config("tiny", sets=["training.steps=100"])


def test_flips_are_parsed_beside_kills_and_never_taken_for_kills(cfg):
    plans = ["server:1@step=30;flip:server:1@step=20:bit=30,col=2", "flip:trainer:0@step=5:of=state,seed=7"]
    assert [str(k) for k in parse_kill_plans(plans, cfg)] == ["server:1@step=30"]
    flips = parse_flips(plans, cfg)
    assert flips == [Flip("server", 1, 20, col=2, bit=30, seq=0),
                     Flip("trainer", 0, 5, part="state", seed=7, seq=1)]
    assert [str(f) for f in flips] == ["flip:server:1@step=20:col=2,bit=30",
                                       "flip:trainer:0@step=5:of=state,seed=7"]
    assert parse_flips([str(f) for f in flips], cfg) == flips  # what a bench passes on parses back


@pytest.mark.parametrize("plan, needle", [
    ("flip:parity:0@step=3", "malformed corruption plan.*ROLE is server or trainer"),
    ("flip:server:1@time=3", "malformed corruption plan"),
    ("flip:server:9@step=3", "server:9 does not exist"),
    ("flip:trainer:2@step=3", "trainer:2 does not exist"),
    ("flip:server:1@step=100", "not before the last step"),
    ("flip:server:1@step=3:bit", "expected KEY=VALUE"),
    ("flip:server:1@step=3:bit=32", "bit must be 0..31"),
    ("flip:server:1@step=3:bit=-1", "bit must be a whole number"),
    ("flip:server:1@step=3:bit=1,bit=2", "given twice"),
    ("flip:server:1@step=3:of=grad", "of must be weight, state, checkpoint, gradient or parity"),
    ("flip:trainer:0@step=3:of=parity", "of=parity flips a bit of a parity row one server keeps"),
    ("flip:server:*@step=3:of=parity", "of=parity flips a bit of a parity row one server keeps"),
    ("flip:server:1@step=3:of=parity,row=4", "of=parity flips a bit of a parity row one server keeps"),
    ("flip:server:1@step=3:of=gradient", "of=gradient flips a bit of the gradient message a trainer sends"),
    ("flip:server:1@step=3:of=checkpoint,row=5", "of=checkpoint flips a bit of a file at rest"),
    ("flip:server:*@step=3:of=checkpoint", "name the server"),
    ("flip:trainer:*@step=3", "only a server row can be named by"),
    ("flip:server:1@step=3:col=8", "col must be below 8"),
    ("flip:server:1@step=3:of=state,col=1", "col must be below 1"),
    ("flip:server:1@step=3:row=15746", "row must be a global row id below 15746"),
    ("flip:trainer:0@step=3:row=5", "unknown option 'row' for a trainer"),
])
def test_bad_plans_are_one_line_naming_the_problem(cfg, plan, needle):
    assert sum(cfg.data.cardinalities) == 15746 and cfg.model.dim == 8  # what the needles above say
    with pytest.raises(KillPlanError, match=needle) as err:
        load_config("tiny", sets=["training.steps=100"], kill=[plan])
    assert "\n" not in str(err.value)


def test_optimizer_state_is_refused_where_the_optimizer_keeps_none():
    with pytest.raises(KillPlanError, match="training.optimizer = 'sgd' keeps no per-row state"):
        load_config("tiny", sets=["training.optimizer='sgd'"], kill=["flip:server:0@step=3:of=state"])
    with pytest.raises(KillPlanError, match="training.dense_optimizer = 'sgd' keeps no state"):
        load_config("tiny", sets=["training.dense_optimizer='sgd'"], kill=["flip:trainer:0@step=3:of=state"])


def test_flip_bit_changes_exactly_one_bit_and_says_what_it_was():
    a = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
    before = a.copy()
    assert flip_bit(a, 2, 31) == (0.5, -0.5)  # the sign
    diff = a.view(np.uint32) ^ before.view(np.uint32)
    assert np.count_nonzero(diff) == 1 and diff[1, 0] == 1 << 31
    assert flip_bit(a, 2, 31) == (-0.5, 0.5) and np.array_equal(a, before)  # its own inverse


def test_placement_is_a_function_of_the_seeds_and_the_plan_position():
    f = Flip("server", 0, 5)
    draws = {place(f, 1, 1000, 16) for _ in range(3)}
    assert len(draws) == 1
    assert place(f, 2, 1000, 16) != place(f, 1, 1000, 16)
    assert place(Flip("server", 0, 5, seq=1), 1, 1000, 16) != place(f, 1, 1000, 16)
    assert place(Flip("server", 0, 5, seed=3), 1, 1000, 16) != place(f, 1, 1000, 16)
    pick, col, bit = place(Flip("server", 0, 5, col=7, bit=30), 1, 1000, 16)
    assert (col, bit) == (7, 30) and 0 <= pick < 1000


def _holder(tmp_path: Path, slot: Slot, cfg) -> SimpleNamespace:
    return SimpleNamespace(cfg=cfg, first_rank=3, out_path=tmp_path / "run.h5", run_id="abc",
                           offsets=table_offsets(cfg.data.cardinalities), slot=slot, kill_name=slot,
                           now=lambda: 1.5)


def test_a_server_flip_hits_the_row_it_names_once_and_leaves_a_note(cfg, tmp_path):
    dim = cfg.model.dim
    offsets = table_offsets(cfg.data.cardinalities)
    rows = np.array([5, 60, 1200], dtype=np.int64)
    table_of_1200 = int(np.searchsorted(offsets, 1200, side="right")) - 1
    assert offsets[table_of_1200] <= 1200 < offsets[table_of_1200 + 1] and table_of_1200 > 0
    table = np.arange(3 * (dim + 1), dtype=np.float32).reshape(3, dim + 1)
    before = table.copy()
    holder = _holder(tmp_path, Slot("server", 1), cfg)
    c = Corrupter(holder, parse_flips(["flip:server:1@step=4:row=1200,col=2,bit=31",
                                       "flip:server:1@step=4:of=state,row=5,bit=0",
                                       "flip:server:0@step=4", "flip:server:1@step=6:row=7"], cfg))
    assert c.due(3) == [] and len(c.due(4)) == 2  # server:0's flip is another rank's
    c.at_step(4, {"table": table, "global_rows": rows})
    c.at_step(4, {"table": table, "global_rows": rows})  # re-executed after a rollback: no second flip
    changed = np.argwhere(table != before)
    assert changed.tolist() == [[0, dim], [2, 2]]
    assert table[2, 2] == -before[2, 2]
    c.at_step(6, {"table": table, "global_rows": rows})  # row 7 is not held: not fired, says why
    notes = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert [n["seq"] for n in notes] == [0, 1, 3]
    hit, state, missed = notes
    assert (hit["global_row"], hit["table"], hit["row"], hit["col"], hit["bit"]) == \
        (1200, table_of_1200, 1200 - offsets[table_of_1200], 2, 31)
    assert (hit["before"], hit["after"]) == (float(before[2, 2]), -float(before[2, 2]))
    assert state["part"] == "state" and state["col"] == 0 and state["global_row"] == 5
    assert not missed["fired"] and "holds no row 7 at step 6" in missed["why"]
    assert describe(hit).startswith(f"flip:server:1@step=4:row=1200,col=2,bit=31: bit 31 of table "
                                    f"{table_of_1200} row {1200 - offsets[table_of_1200]} (global row 1200)")
    assert json.dumps(notes)  # what the result file stores
    assert not notes_dir(holder.out_path, holder.run_id).exists()


def test_a_flip_of_any_server_is_made_by_the_one_holding_the_drawn_row(cfg, tmp_path):
    dim = cfg.model.dim
    flips = parse_flips(["flip:server:*@step=2:bit=31"], cfg)
    assert str(flips[0]) == "flip:server:*@step=2:bit=31" and flips[0].target == "the server holding its row"
    total = sum(cfg.data.cardinalities)
    row = place(flips[0], cfg.training.seed, total, dim)[0]  # the row every server computes
    halves = [np.arange(0, total // 2), np.arange(total // 2, total)]
    tables = [np.ones((len(h), dim + 1), dtype=np.float32) for h in halves]
    for i, (rows, table) in enumerate(zip(halves, tables, strict=True)):
        Corrupter(_holder(tmp_path, Slot("server", i), cfg), flips).at_step(
            2, {"table": table, "global_rows": rows.astype(np.int64)})
    (note,) = read_notes(notes_dir(tmp_path / "run.h5", "abc"))
    owner = int(row >= total // 2)
    assert note["global_row"] == row and note["index"] == owner
    assert np.count_nonzero(tables[owner] == -1) == 1 and np.all(tables[1 - owner] == 1)


def test_a_checkpoint_flip_changes_one_bit_of_the_newest_part_and_the_restore_refuses_it(cfg, tmp_path):
    from mpiec.storage.checkpoint import CheckpointError, CheckpointStore

    root = tmp_path / "ck"
    store = CheckpointStore(root, warn=False)
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    for step in (9, 19):
        info = store.write_part(step, "server-1", {"table": table, "global_rows": np.arange(10)})
        store.commit(step, {"server-1": info})
    before = {p: p.read_bytes() for p in root.rglob("*.npy")}
    holder = _holder(tmp_path, Slot("server", 1), cfg)
    holder.checkpoint_root = lambda: root
    Corrupter(holder, parse_flips(["flip:server:1@step=22:of=checkpoint,bit=3"], cfg)).at_step(22, {})
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert note["fired"] and note["checkpoint_step"] == 19 and note["file"] == "server-1.table.npy"
    changed = [p for p in before if p.read_bytes() != before[p]]
    assert changed == [root / "step-000000019" / "server-1.table.npy"]
    diff = np.frombuffer(changed[0].read_bytes(), np.uint8) ^ np.frombuffer(before[changed[0]], np.uint8)
    assert np.count_nonzero(diff) == 1 and int(diff[note["byte"]]) == 1 << 3
    with pytest.raises(CheckpointError, match="server-1.table.npy: corrupted"):
        store.read_part(19, "server-1")
    assert np.array_equal(store.read_part(9, "server-1")["table"], table)  # the older one is intact
    assert "at rest" in describe(note)


def test_a_checkpoint_flip_without_a_checkpoint_says_why(cfg, tmp_path):
    holder = _holder(tmp_path, Slot("trainer", 0), cfg)
    c = Corrupter(holder, parse_flips(["flip:trainer:0@step=2:of=checkpoint",
                                       "flip:trainer:0@step=3:of=checkpoint"], cfg))
    holder.checkpoint_root = lambda: None
    c.at_step(2, {})
    holder.checkpoint_root = lambda: tmp_path / "empty"
    c.at_step(3, {})
    first, second = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert not first["fired"] and "writes no checkpoints" in first["why"]
    assert not second["fired"] and "no complete checkpoint" in second["why"]


def test_a_trainer_flip_hits_its_dense_replica(cfg, tmp_path):
    params, state = np.ones(10, dtype=np.float32), np.ones(10, dtype=np.float32)
    holder = _holder(tmp_path, Slot("trainer", 0), cfg)
    c = Corrupter(holder, parse_flips(["flip:trainer:0@step=2:of=state,bit=31"], cfg))
    c.at_step(2, {"params": params, "dense_state": state})
    assert np.all(params == 1) and np.count_nonzero(state == -1) == 1
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert state[note["param"]] == -1 and "dense parameter" in describe(note)


def test_detections_are_matched_to_the_flips_they_can_see():
    from mpiec.failures.corruption import mark_detections

    row = {"fired": True, "time": 1.0, "step": 4, "global_row": 77}
    dense = {"fired": True, "time": 1.1, "step": 4, "param": 3}
    part = {"fired": True, "time": 1.2, "step": 5, "file": "server-1.table.npy"}
    events = [(4, 0.5, "parity_mismatch", 0, "server", 0, "1 parity rows differ"),  # before the flips
              (6, 2.0, "parity_mismatch", 0, "server", 0, "1 parity rows differ"),
              (6, 2.1, "scrub_repair", 0, "server", 1, "global row 78: stripe 39, data member 0"),
              (7, 2.5, "scrub_repair", 0, "server", 1, "global row 77: stripe 38, data member 1"),
              (8, 3.0, "restore_failed", 0, "server", 1, "checkpoint of step 19 unusable"),
              (8, 3.1, "restore_failed", 0, "server", 1, ".../step-000000019/server-1.table.npy: corrupted")]
    mark_detections([row, dense, part], events)
    assert (row["detected_step"], row["detected_by"], row["repaired_step"]) == (6, "parity_mismatch", 7)
    assert dense["detected_step"] is None and dense["detected_by"] is None  # no detector sees it
    assert (part["detected_step"], part["detected_by"]) == (8, "restore_failed")


def test_a_gradient_flip_changes_what_arrives_not_what_the_trainer_keeps(cfg, tmp_path):
    rows = np.arange(12, dtype=np.float32).reshape(6, 2) + 1
    counts = np.array([0, 0, 2, 4])  # 2 trainers, then 2 servers: 2 rows for server 0, 4 for server 1
    holder = _holder(tmp_path, Slot("trainer", 1), cfg)
    c = Corrupter(holder, parse_flips(["flip:trainer:1@step=4:of=gradient,bit=31"], cfg))
    c.at_step(4, {"params": np.ones(3, np.float32), "dense_state": np.ones(3, np.float32)})  # not here
    assert not notes_dir(holder.out_path, holder.run_id).exists()
    sent = c.in_message(4, rows, counts, first_server=2)
    assert sent is not rows and np.all(rows == np.arange(12).reshape(6, 2) + 1)  # the trainer's copy kept
    (changed,) = np.flatnonzero(sent.reshape(-1) != rows.reshape(-1))
    assert sent.reshape(-1)[changed] == -rows.reshape(-1)[changed]  # bit 31: the sign
    assert c.in_message(4, rows, counts, first_server=2) is rows  # fired once: a note exists
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert note["fired"] and note["element"] == changed and note["server"] == (0 if changed < 4 else 1)
    assert "gradient message trainer:1 sent at step 4 (in transit" in describe(note)


def test_a_gradient_flip_with_nothing_sent_says_why(cfg, tmp_path):
    holder = _holder(tmp_path, Slot("trainer", 0), cfg)
    c = Corrupter(holder, parse_flips(["flip:trainer:0@step=4:of=gradient"], cfg))
    empty = np.zeros((0, 2), np.float32)
    assert c.in_message(4, empty, np.zeros(4, dtype=np.int64), first_server=2) is empty
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert not note["fired"] and "sent no gradient rows at step 4" in note["why"]


def test_a_message_flip_is_detected_by_its_steps_check_and_repaired_by_the_step_again():
    from mpiec.failures.corruption import mark_detections

    hit = {"fired": True, "time": 1.0, "step": 4, "message": "gradient", "element": 3}
    missed = {"fired": True, "time": 1.0, "step": 9, "message": "gradient", "element": 3}
    events = [(4, 1.1, "message_corrupt", 3, "server", 0, "step 4: the gradient message from trainer 0 ..."),
              (4, 1.3, "restore_end", 3, "server", 0, "resume at step 4")]
    mark_detections([hit, missed], events)
    assert (hit["detected_step"], hit["detected_by"], hit["repaired_step"]) == (4, "message_corrupt", 4)
    assert (missed["detected_step"], missed["repaired_step"]) == (None, None)  # step 9's was not checked


def test_a_parity_flip_changes_one_bit_of_one_held_parity_row_and_names_its_stripe(cfg, tmp_path):
    from mpiec.failures.corruption import mark_detections
    from mpiec.strategies.api.cover import Redundancy

    rows = np.zeros((4, 6), dtype=np.uint8)
    held = Redundancy(rows, stripes=np.array([10, 11, 12, 13]), members=np.array([0, 1, 0, 1]))
    holder = _holder(tmp_path, Slot("server", 1), cfg)
    c = Corrupter(holder, parse_flips(["flip:server:1@step=3:of=parity"], cfg))
    c.at_step(3, {"table": np.ones((2, 9), np.float32), "global_rows": np.arange(2)}, lambda: held)
    assert np.count_nonzero(rows) == 1 and bin(int(rows.sum())).count("1") == 1
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    slot = int(np.flatnonzero(rows.any(axis=1))[0])
    assert note["fired"] and note["parity_row"] == slot and note["stripe"] == 10 + slot
    assert note["parity_member"] == slot % 2 and "(stripe 1" in describe(note)
    note["time"] = 1.0
    events = [(3, 1.1, "parity_mismatch", 0, "server", 1, "1 parity rows differ"),
              (3, 1.2, "scrub_repair", 0, "server", 1,
               f"stripe {note['stripe']}, parity member {note['parity_member']}: re-encoded from the data")]
    mark_detections([note], events)
    assert (note["detected_by"], note["repaired_step"]) == ("parity_mismatch", 3)


def test_a_parity_flip_on_a_server_without_parity_says_why(cfg, tmp_path):
    holder = _holder(tmp_path, Slot("server", 0), cfg)
    c = Corrupter(holder, parse_flips(["flip:server:0@step=3:of=parity"], cfg))
    c.at_step(3, {"table": np.ones((2, 9), np.float32), "global_rows": np.arange(2)}, lambda: None)
    (note,) = read_notes(notes_dir(holder.out_path, holder.run_id))
    assert not note["fired"] and "keeps no parity rows" in note["why"]


def test_a_row_flip_undone_by_a_rollback_past_it_counts_as_repaired():
    from mpiec.failures.corruption import mark_detections

    undone = {"fired": True, "time": 1.0, "step": 12, "global_row": 5}
    kept = {"fired": True, "time": 1.0, "step": 12, "global_row": 6}
    mark_detections([undone], [(12, 1.1, "parity_mismatch", 0, "server", 0, "1 parity rows differ"),
                               (12, 1.3, "restore_end", 1, "server", 0, "resume at step 10")])
    mark_detections([kept], [(14, 1.3, "restore_end", 1, "server", 0, "resume at step 13")])  # after it
    assert (undone["detected_step"], undone["repaired_step"]) == (12, 12)
    assert kept["repaired_step"] is None


def test_kept_events_come_back_as_the_rows_a_report_carries_and_the_folder_goes(tmp_path):
    from mpiec.failures.corruption import event_row, keep_event, read_kept_events

    where = tmp_path / ".run.x.found"
    row = (np.int64(21), 0.1234567891234, "message_corrupt", np.int32(3), "server", 1, "step 21: ...")
    keep_event(where, 3, row)
    keep_event(where, 4, (22, 1.5, "parity_mismatch", 4, "server", 0, ""))
    back = read_kept_events(where)
    assert sorted(back) == sorted([event_row(row), (22, 1.5, "parity_mismatch", 4, "server", 0, "")])
    assert event_row(row) in back and not where.exists()
    assert read_kept_events(where) == []  # nothing kept: nothing to read


def test_a_detection_locates_a_row_when_it_names_it():
    from mpiec.failures.corruption import mark_detections

    def note(row):
        return {"fired": True, "step": 5, "time": 1.0, "global_row": row}

    events = [(6, 2.0, "shard_mismatch", 3, "server", 0,
               "global row 7: 3 row(s) of server:0 changed at rest, found in the shard check "
               "(global rows 7, 12, 40); not repaired"),
              (6, 2.0, "parity_mismatch", 4, "server", 1, "stripe 9: parity differs")]
    named, listed, other = note(7), note(40), note(41)
    mark_detections([named, listed, other], events)
    assert (named["located"], listed["located"], other["located"]) == (True, True, False)
    assert other["detected_by"] == "shard_mismatch"  # detected (the first after it), not located
