"""Silent data corruption as a planned fault: the ``flip:`` plans of a kill plan, and their injection.

Owns the ``flip:`` syntax (docs/running.md "Corruption"), where a flip lands and the record it
leaves. Every other fault mpiec injects is fail-stop (a rank dies and the runtime says so); a flip
changes one bit of a rank's live state and tells no one, as a core or a memory that computes or
stores a wrong value does. Syntax (a plan of ``--kill`` / ``failures.kill``, beside kills)::

    flip:server:1@step=20                 one bit of one embedding row's weights on server 1, at the
                                          start of step 20 (row, column and bit drawn, see below)
    flip:server:1@step=20:of=state        ... of the row's optimizer state (Adagrad's accumulator)
    flip:server:1@step=20:row=4711,col=3,bit=30
                                          placement given: ``row`` a global row id (tables in order,
                                          as ``param_checksum`` and the shard digests number them),
                                          ``col`` a column of the part (``of``), ``bit`` 0 (the
                                          mantissa's lowest) .. 22 mantissa, 23 .. 30 exponent, 31 sign
    flip:trainer:0@step=20:bit=22         one bit of a parameter of trainer 0's dense replica
                                          (``of=state``: of its optimizer state)
    flip:trainer:0@step=20:of=gradient    in transit: one bit of an element of the embedding-gradient
                                          message trainer 0 sends the servers in step 20 (what the
                                          servers receive; the trainer and its strategy keep the sent
                                          values), an element drawn among the message's
    flip:server:1@step=20:of=checkpoint   at rest: one bit of server 1's part of the newest complete
                                          checkpoint on disk at step 20 (a trainer: the ``trainer``
                                          part), an element of its largest file drawn
    flip:server:1@step=20:of=parity       one bit of one of the parity rows server 1 keeps in memory
                                          (a code's redundancy, ``ServerAgent.redundancy``), drawn
    flip:server:1@step=20:seed=7          another draw
    flip:server:*@step=20                 a row drawn among all the model's rows, flipped by whichever
                                          server holds it (the same row under every placement)

Invariants:

* silent: no rank is told; the only trace is the note the corrupting rank leaves (as a kill's
  victim does) and the monitor turns into the result file's ``corrupted`` events and
  ``summary.corruptions`` (what was hit, the value before and after);
* placement is a pure function of the plan, ``training.seed`` and the plan's position among the
  run's flips, and of the rows the server holds at the step (``row`` not given: drawn among them;
  given: a server that does not hold it then flips nothing, and the flip is reported as not fired);
  ``server:*`` draws among all rows, so it hits the same row whatever the strategy's placement;
* a flip fires at most once in a run: before it flips, a rank looks for the flip's note (a
  replacement re-executing the step after a rollback does not flip again, as a one-off hardware
  fault would not);
* flips need no ULFM (they run under the emulated mode and any MPI) and never change the run's
  control flow: what they do to the model is what training, the strategy and the final
  ``param_checksum`` make of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mpiec.errors import KillPlanError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mpiec.config import Config
    from mpiec.layout import Slot
    from mpiec.strategies.api.cover import Redundancy

PREFIX = "flip:"
ROLES = ("server", "trainer")
PARTS = ("weight", "state", "checkpoint", "gradient", "parity")
_PLAN = re.compile(r"^flip:([a-z]+):([0-9]{1,18}|\*)@step=([0-9]{1,18})(?::(.*))?$")
ANY = -1  # ``server:*``: whichever server holds the row
_OPTIONS = {"server": ("of", "row", "col", "bit", "seed"), "trainer": ("of", "bit", "seed")}
_SEED_LIMIT = 2**63


@dataclass(frozen=True)
class Flip:
    """One planned bit flip in the live state of whichever rank holds ``role:index`` at ``step``."""

    role: str
    index: int
    step: int
    part: str = "weight"  # one of ``PARTS``: weights, optimizer state, a file at rest, a message, parity
    row: int | None = None  # server: a global row id (None: drawn)
    col: int | None = None  # a column of the part (None: drawn)
    bit: int | None = None  # 0..31 of the float32 (None: drawn)
    seed: int = 0
    seq: int = 0  # position among the run's flips (with the seed: the draw)

    @property
    def target(self) -> str:
        """Who flips: ``server:1``, or ``the server holding its row`` for ``server:*``."""
        return "the server holding its row" if self.index == ANY else f"{self.role}:{self.index}"

    def __str__(self) -> str:
        opts = [f"of={self.part}"] if self.part != "weight" else []
        opts += [f"{k}={v}" for k, v in (("row", self.row), ("col", self.col), ("bit", self.bit))
                 if v is not None]
        if self.seed:
            opts.append(f"seed={self.seed}")
        who = "*" if self.index == ANY else str(self.index)
        return f"flip:{self.role}:{who}@step={self.step}" + (":" + ",".join(opts) if opts else "")


def is_flip(plan: str) -> bool:
    """``plan`` (one plan of a kill plan) is a corruption, not a kill."""
    return plan.strip().startswith(PREFIX)


def state_columns(cfg: Config) -> int:
    """Columns of optimizer state after a server row's ``model.dim`` weights (row-wise Adagrad: 1)."""
    return 1 if cfg.training.optimizer == "adagrad" else 0


def parse_flip(plan: str, cfg: Config, seq: int = 0) -> Flip:
    """One ``flip:`` plan, validated against the layout and the model (``KillPlanError``, one line)."""
    text = plan.strip()
    shown = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    m = _PLAN.match(text)
    if not m or m.group(1) not in ROLES:
        raise KillPlanError(f"malformed corruption plan '{shown}': expected "
                            f"flip:ROLE:INDEX@step=N[:KEY=VALUE,...] (ROLE is {' or '.join(ROLES)}; "
                            "e.g. flip:server:1@step=20:bit=30)")
    role, step = m.group(1), int(m.group(3))
    index = ANY if m.group(2) == "*" else int(m.group(2))
    if index == ANY and role != "server":
        raise KillPlanError(f"corruption plan '{shown}': only a server row can be named by '*' (whichever "
                            "server holds it); name the trainer")
    count = cfg.layout.servers if role == "server" else cfg.layout.trainers
    if index >= count:
        raise KillPlanError(f"corruption plan '{shown}': {role}:{index} does not exist (the layout has "
                            f"{count} {role}{'s' if count != 1 else ''})")
    if step >= cfg.training.steps:
        raise KillPlanError(f"corruption plan '{shown}': step {step} is not before the last step "
                            f"(training.steps = {cfg.training.steps})")
    opts: dict[str, str] = {}
    for item in (m.group(4) or "").split(",") if m.group(4) is not None else []:
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not key or not value:
            raise KillPlanError(f"corruption plan '{shown}': expected KEY=VALUE, got '{item}'")
        if key not in _OPTIONS[role]:
            raise KillPlanError(f"corruption plan '{shown}': unknown option '{key}' for a {role} "
                                f"(use {', '.join(_OPTIONS[role])})")
        if key in opts:
            raise KillPlanError(f"corruption plan '{shown}': option '{key}' is given twice")
        opts[key] = value
    part = opts.pop("of", "weight")
    if part not in PARTS:
        raise KillPlanError(f"corruption plan '{shown}': of must be weight, state, checkpoint, gradient or "
                            f"parity, got '{part}'")
    if part == "parity" and (role != "server" or index == ANY or {"row", "col"} & set(opts)):
        raise KillPlanError(f"corruption plan '{shown}': of=parity flips a bit of a parity row one server "
                            "keeps: name the server, without row or col (flip:server:I@step=N:of=parity)")
    if part == "gradient" and role != "trainer":
        raise KillPlanError(f"corruption plan '{shown}': of=gradient flips a bit of the gradient message a "
                            "trainer sends: name the trainer (flip:trainer:I@step=N:of=gradient)")
    if part == "checkpoint" and index == ANY:
        raise KillPlanError(f"corruption plan '{shown}': of=checkpoint flips a bit of one server's part: "
                            "name the server")
    if part == "checkpoint" and {"row", "col"} & set(opts):
        raise KillPlanError(f"corruption plan '{shown}': of=checkpoint flips a bit of a file at rest; row "
                            "and col name an element of a rank's memory (leave them out)")
    numbers: dict[str, int] = {}
    for key, value in opts.items():
        if not re.fullmatch(r"[0-9]{1,19}", value) or int(value) >= _SEED_LIMIT:
            raise KillPlanError(f"corruption plan '{shown}': {key} must be a whole number >= 0, "
                                f"got '{value}'")
        numbers[key] = int(value)
    if numbers.get("bit", 0) > 31:
        raise KillPlanError(f"corruption plan '{shown}': bit must be 0..31 (a float32), got {numbers['bit']}")
    if part == "state" and role == "server" and not state_columns(cfg):
        raise KillPlanError(f"corruption plan '{shown}': of=state, but training.optimizer = "
                            f"'{cfg.training.optimizer}' keeps no per-row state")
    if part == "state" and role == "trainer" and cfg.training.dense_optimizer != "adagrad":
        raise KillPlanError(f"corruption plan '{shown}': of=state, but training.dense_optimizer = "
                            f"'{cfg.training.dense_optimizer}' keeps no state")
    width = cfg.model.dim if part != "state" else state_columns(cfg)
    if "col" in numbers and numbers["col"] >= width:
        raise KillPlanError(f"corruption plan '{shown}': col must be below {width} (the {part} columns "
                            f"of a row), got {numbers['col']}")
    rows = sum(cfg.data.cardinalities)
    if "row" in numbers and numbers["row"] >= rows:
        raise KillPlanError(f"corruption plan '{shown}': row must be a global row id below {rows} (the "
                            f"rows of every table), got {numbers['row']}")
    return Flip(role, index, step, part=part, row=numbers.get("row"), col=numbers.get("col"),
                bit=numbers.get("bit"), seed=numbers.get("seed", 0), seq=seq)


def parse_flips(plans: list[str], cfg: Config) -> list[Flip]:
    """The ``flip:`` plans of a kill plan's strings (``;`` separates plans), numbered in order."""
    flips: list[Flip] = []
    for plan in plans:
        if not isinstance(plan, str):
            continue  # the kill plans' parser refuses it
        for part in plan.split(";"):
            if is_flip(part):
                flips.append(parse_flip(part, cfg, seq=len(flips)))
    return flips


def flip_bit(array: np.ndarray, flat: int, bit: int) -> tuple[float, float]:
    """Flip ``bit`` of element ``flat`` of a C-contiguous float32 ``array`` in place; (before, after)."""
    words = array.reshape(-1).view(np.uint32)
    before = float(array.reshape(-1)[flat])
    words[flat] ^= np.uint32(1 << bit)
    return before, float(array.reshape(-1)[flat])


def place(flip: Flip, seed: int, candidates: int, width: int) -> tuple[int, int, int]:
    """(candidate, column, bit) of ``flip`` among ``candidates`` rows (or parameters, width 1) of
    ``width`` columns: what the plan gives, the rest drawn from (``training.seed``, the plan's seed, its
    position)."""
    rng = np.random.default_rng([seed, flip.seed, flip.seq])
    pick = int(rng.integers(candidates))
    col = flip.col if flip.col is not None else int(rng.integers(width))
    bit = flip.bit if flip.bit is not None else int(rng.integers(32))
    return pick, col, bit


def notes_dir(out_path: Path, run_id: str) -> Path:
    """Where the corrupting ranks of one run leave their notes (as kills' victims do theirs)."""
    return out_path.parent / f".{out_path.stem}.{run_id}.flips"


def write_note(directory: Path, seq: int, record: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{seq}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(directory / f"{seq}.json")  # atomic: never half a note


def read_notes(directory: Path) -> list[dict[str, Any]]:
    """Every complete note of ``directory``, by plan position; the directory is removed."""
    out = []
    if directory.is_dir():
        for f in sorted(directory.iterdir()):
            try:
                if not f.name.startswith("."):
                    out.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                pass
            finally:
                f.unlink(missing_ok=True)
        directory.rmdir()
    return sorted(out, key=lambda r: r.get("seq", 0))


class Holder(Protocol):
    """What a flip reads of its rank (``roles.context.RankContext``)."""

    cfg: Config
    first_rank: int
    out_path: Path
    run_id: str
    offsets: np.ndarray

    @property
    def slot(self) -> Slot: ...
    @property
    def kill_name(self) -> Slot: ...
    def now(self) -> float: ...
    def checkpoint_root(self) -> Path | None: ...


class Corrupter:
    """The flips of a run on one rank: at the start of each step, the ones due for the slot name
    this rank holds (``Holder.kill_name``, the name kill plans use) flip a bit of its live state.

    ``at_step`` is called once per step, after the kill switch and before the step's exchange, with
    the role's live arrays (``StateRole.state()``: a server's ``table`` and ``global_rows``, a
    trainer's ``params`` and ``dense_state``); it returns at once when no flip is due."""

    def __init__(self, holder: Holder, flips: list[Flip]) -> None:
        self.holder = holder
        self.flips = flips
        self.steps = {f.step for f in flips}

    def due(self, step: int) -> list[Flip]:
        if step not in self.steps:
            return []
        name = self.holder.kill_name
        return [f for f in self.flips
                if f.step == step and f.role == name.role and f.index in (name.index, ANY)]

    def at_step(self, step: int, state: dict[str, np.ndarray],
                redundancy: Callable[[], Redundancy | None] | None = None) -> None:
        """Fire the flips due at ``step`` on this rank's ``state`` (``StateRole.state()``), or for
        ``of=parity`` on the rows ``redundancy()`` returns (the server's agent's, asked only then)."""
        directory = notes_dir(self.holder.out_path, self.holder.run_id)
        for flip in self.due(step):
            if flip.part == "gradient" or (directory / f"{flip.seq}.json").exists():
                continue  # a message's fires in ``in_message``; or it fired before a rollback came back here
            record = self._record(flip, step)
            hit: dict[str, Any] | None
            if flip.part == "checkpoint":
                hit = self._at_rest(flip)
            elif flip.part == "parity":
                hit = self._parity(flip, redundancy() if redundancy is not None else None)
            elif flip.role == "server":
                hit = self._server(flip, state)
            else:
                hit = self._trainer(flip, state)
            if hit is not None:  # None: ``server:*``'s row is another server's
                write_note(directory, flip.seq, record | hit)

    def in_message(self, step: int, rows: np.ndarray, counts: np.ndarray,
                   first_server: int) -> np.ndarray:
        """The gradient message of ``step`` as it arrives: ``rows`` (``counts[d]`` of them for data
        rank ``d``; servers from data rank ``first_server``) itself, or, when an ``of=gradient``
        flip is due, a copy with one bit flipped (in transit: the sender keeps what it sent).
        Called by a trainer once per step after the gradients are computed, before they are sent."""
        h = self.holder
        directory = notes_dir(h.out_path, h.run_id)
        for flip in self.due(step):
            if flip.part != "gradient" or (directory / f"{flip.seq}.json").exists():
                continue
            record = self._record(flip, step)
            if not rows.size:
                why = f"{h.slot} sent no gradient rows at step {step}"
                write_note(directory, flip.seq, record | {"fired": False, "why": why})
                continue
            pick, _, bit = place(flip, h.cfg.training.seed, rows.size, 1)
            rows = rows.copy()
            before, after = flip_bit(rows, pick, bit)
            dest = int(np.searchsorted(np.cumsum(counts), pick // rows.shape[1], side="right"))
            write_note(directory, flip.seq, record | {
                "fired": True, "message": "gradient", "element": pick, "bit": bit, "before": before,
                "after": after, "server": dest - first_server})
        return rows

    def _record(self, flip: Flip, step: int) -> dict[str, Any]:
        """The start of a flip's note: which plan, when, on which rank (what it hit is added)."""
        h = self.holder
        return {"seq": flip.seq, "plan": str(flip), "step": step, "time": h.now(), "rank": h.first_rank,
                "role": h.slot.role, "index": h.slot.index, "part": flip.part}

    def _server(self, flip: Flip, state: dict[str, np.ndarray]) -> dict[str, Any] | None:
        table, rows = state["table"], state["global_rows"]
        dim = self.holder.cfg.model.dim
        width = dim if flip.part == "weight" else table.shape[1] - dim
        if flip.index == ANY:  # the row drawn among all rows (the same on every server): its holder flips
            drawn, col, bit = place(flip, self.holder.cfg.training.seed, int(self.holder.offsets[-1]), width)
            where = np.flatnonzero(rows == (flip.row if flip.row is not None else drawn))
            if not len(where):
                return None
            pick = int(where[0])
        else:
            pick, col, bit = place(flip, self.holder.cfg.training.seed, len(rows), width)
        if flip.row is not None and flip.index != ANY:
            where = np.flatnonzero(rows == flip.row)
            if not len(where):
                return {"fired": False, "why": f"{self.holder.slot} holds no row {flip.row} at step "
                                               f"{flip.step}"}
            pick = int(where[0])
        offsets = self.holder.offsets
        global_row = int(rows[pick])
        tab = int(np.searchsorted(offsets, global_row, side="right") - 1)
        column = col if flip.part == "weight" else dim + col
        before, after = flip_bit(table, pick * table.shape[1] + column, bit)
        return {"fired": True, "global_row": global_row, "table": tab, "row": global_row - int(offsets[tab]),
                "col": col, "bit": bit, "before": before, "after": after}

    def _parity(self, flip: Flip, held: Redundancy | None) -> dict[str, Any]:
        """One bit of one of the parity rows this server keeps, drawn among them."""
        if held is None:
            return {"fired": False, "why": f"{self.holder.slot} keeps no parity rows (strategy "
                                           f"{self.holder.cfg.strategy.name})"}
        rows = held.rows
        pick, _, bit = place(flip, self.holder.cfg.training.seed, rows.size, 1)
        slot = pick // rows.shape[1]
        words = rows.reshape(-1)
        bit %= 8 * words.itemsize
        word = words[pick:pick + 1].view(np.uint8)  # little-endian: bit b is in byte b // 8
        word[bit // 8] ^= np.uint8(1 << (bit % 8))
        return {"fired": True, "parity_row": int(slot), "stripe": int(held.stripes[slot]),
                "parity_member": int(held.members[slot]), "element": int(pick), "bit": int(bit)}

    def _at_rest(self, flip: Flip) -> dict[str, Any]:
        """One bit of this slot's part of the newest complete checkpoint, in its largest file."""
        from mpiec.storage.checkpoint import CheckpointError, CheckpointStore

        root = self.holder.checkpoint_root()
        if root is None:
            return {"fired": False, "why": f"strategy {self.holder.cfg.strategy.name} writes no checkpoints"}
        store = CheckpointStore(root, warn=False)
        steps = store.complete_steps()
        if not steps:
            return {"fired": False, "why": f"no complete checkpoint in {root} at step {flip.step}"}
        name = f"server-{flip.index}" if flip.role == "server" else "trainer"
        try:
            entry = store.manifest(steps[0])["parts"].get(name)
        except CheckpointError as exc:
            return {"fired": False, "why": str(exc)}
        if not entry or not entry["files"]:
            return {"fired": False, "why": f"the checkpoint of step {steps[0]} has no part {name!r}"}
        biggest = max(entry["files"].values(), key=lambda fe: int(fe["bytes"]))
        path = store.step_dir(steps[0]) / biggest["file"]
        array = np.load(path, mmap_mode="r")
        itemsize, count, offset = array.dtype.itemsize, array.size, int(array.offset)
        del array
        if not count:
            return {"fired": False, "why": f"{path} holds no element"}
        pick, _, bit = place(flip, self.holder.cfg.training.seed, count, 1)
        bit %= 8 * itemsize
        byte = offset + pick * itemsize + bit // 8  # little-endian: bit b of an element is in its byte b // 8
        with open(path, "r+b") as f:
            f.seek(byte)
            old = f.read(1)[0]
            f.seek(byte)
            f.write(bytes([old ^ (1 << (bit % 8))]))
        return {"fired": True, "checkpoint_step": steps[0], "file": path.name, "path": str(path),
                "element": pick, "bit": bit, "byte": byte}

    def _trainer(self, flip: Flip, state: dict[str, np.ndarray]) -> dict[str, Any]:
        array = state["params"] if flip.part == "weight" else state["dense_state"]
        pick, _, bit = place(flip, self.holder.cfg.training.seed, array.size, 1)
        before, after = flip_bit(array, pick, bit)
        return {"fired": True, "param": pick, "bit": bit, "before": before, "after": after}


#: the runtime's check of a server's own rows (``failures.shard_check_every``): its detection
SHARD_MISMATCH = "shard_mismatch"
#: the events by which a strategy or the runtime reports corrupted rows it found (``ecrm``'s
#: ``verify_every`` re-encode, the runtime's shard check; a plug-in that detects corruption emits
#: one of these too)
DETECTIONS = ("parity_mismatch", SHARD_MISMATCH)
#: the runtime's check of the gradient messages (``failures.message_checksums``): its detection
MESSAGE_CORRUPT = "message_corrupt"
#: the event that ends a recovery (detail ``resume at step N``): a refused message's step executed again
RESUMED = "restore_end"
#: the runtime's cross-check of the dense replicas (``failures.dense_check_every``): its detection
#: and its repair (detail ``trainer I: ...``)
REPLICA_MISMATCH, REPLICA_REPAIR = "replica_mismatch", "replica_repair"
#: the event by which a checkpoint restore reports a part it refused (its detail names the file)
REFUSED = "restore_failed"
#: the event by which a strategy reports a row it repaired (detail: ``repair_detail``)
REPAIRED = "scrub_repair"
_REPAIRED_ROW = re.compile(r"^global row ([0-9]+): ")
_RESUMED_AT = re.compile(r"^resume at step ([0-9]+)$")


#: what a rank records of a corruption it found or repaired: kept on disk at once as well
#: (``keep_event``), so that the result file has it even when that rank dies later in the run (its
#: final report, which carries its other events, is then never handed in)
KEPT = frozenset({*DETECTIONS, MESSAGE_CORRUPT, REPLICA_MISMATCH, REPLICA_REPAIR, REFUSED, REPAIRED})


def kept_dir(out_path: Path, run_id: str) -> Path:
    """Where the ranks of one run keep their ``KEPT`` events."""
    return out_path.parent / f".{out_path.stem}.{run_id}.found"


def event_row(event: tuple) -> tuple:
    """An event row ``(step, time, kind, rank, role, index, detail)`` in plain Python types: as
    ``keep_event`` writes it and ``read_kept_events`` gives it back (rows compare equal)."""
    step, at, kind, who, role, index, detail = event
    return int(step), float(at), str(kind), int(who), str(role), int(index), str(detail)


def keep_event(directory: Path, rank: int, event: tuple) -> None:
    """Keep one event row of ``rank`` on disk."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{rank}-{time.monotonic_ns()}"
    tmp = directory / f".{name}.tmp"
    tmp.write_text(json.dumps(list(event_row(event))))
    tmp.replace(directory / f"{name}.json")  # atomic: never half a row


def read_kept_events(directory: Path) -> list[tuple]:
    """Every event row kept in ``directory`` (the directory is removed)."""
    out = []
    if directory.is_dir():
        for f in sorted(directory.iterdir()):
            try:
                if not f.name.startswith("."):
                    out.append(tuple(json.loads(f.read_text())))
            except (OSError, ValueError):
                pass
            finally:
                f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            directory.rmdir()
    return out


_ROW_LIST = re.compile(r"global rows ([0-9, ]+)")


def _names_row(detail: str, global_row: int) -> bool:
    """A detection's detail names ``global_row``: ``global row G: ...`` first, or among ``global
    rows A, B, ...`` (the runtime's shard check)."""
    if (m := _REPAIRED_ROW.match(detail)) and int(m.group(1)) == global_row:
        return True
    return any(global_row in {int(x) for x in m.group(1).replace(" ", "").split(",") if x}
               for m in _ROW_LIST.finditer(detail))


def repair_detail(global_row: int, what: str) -> str:
    """A ``REPAIRED`` event's detail: the row first (``mark_detections`` matches flips by it)."""
    return f"global row {global_row}: {what}"


def mark_detections(notes: list[dict[str, Any]], events: list[tuple]) -> None:
    """Add to each fired flip's note the first detection after it (``events``: the result file's
    rows, ``(step, time, kind, ...)``): ``detected_step`` and ``detected_by`` (None: nothing in the run
    reported it), and for a server row ``repaired_step`` (the first ``REPAIRED`` event naming its row
    after it; None: none). A part at rest is detected by the first ``REFUSED`` event naming its file;
    a server row by the first ``DETECTIONS`` event at or after the flip (they name no row: with two
    row flips in a run, the first detection after each is taken); a dense flip by the replicas'
    cross-check (``REPLICA_MISMATCH``; repaired: ``REPLICA_REPAIR`` naming its trainer); a message's
    by a server's check of that step (``MESSAGE_CORRUPT``; repaired when a recovery after it resumed,
    ``RESUMED``: the step executed again without the flip, which fires once). A server row's note
    gets ``located``: its detection (or a repair) named its global row."""
    for note in notes:
        if not note.get("fired"):
            continue
        if "message" in note:  # in transit: a server's check of the step's message, then the step again
            later = [e for e in events if e[2] == MESSAGE_CORRUPT and e[1] >= note["time"]
                     and str(e[6]).startswith(f"step {note['step']}: ")]
            again = [e for e in events if e[2] == RESUMED and later and e[1] >= min(x[1] for x in later)
                     and str(e[6]).startswith("resume at step ")]
            note["repaired_step"] = int(min(again, key=lambda e: e[1])[0]) if again else None
        elif "file" in note:  # at rest: found when a restore refuses the file
            later = [e for e in events if e[2] == REFUSED and e[1] >= note["time"]
                     and note["file"] in str(e[6])]
        elif "global_row" in note or "parity_row" in note:
            later = [e for e in events if e[2] in DETECTIONS and e[1] >= note["time"]]
        else:  # a dense replica's: the replicas' cross-check, if on
            later = [e for e in events if e[2] == REPLICA_MISMATCH and e[1] >= note["time"]]
            fixed = [e for e in events if e[2] == REPLICA_REPAIR and e[1] >= note["time"]
                     and str(e[6]).startswith(f"trainer {note['index']}:")]
            note["repaired_step"] = int(min(fixed, key=lambda e: e[1])[0]) if fixed else None
        first = min(later, key=lambda e: e[1]) if later else None
        note["detected_step"] = int(first[0]) if first else None
        note["detected_by"] = str(first[2]) if first else None
        if "parity_row" in note:  # the scrub names a parity member by its stripe and index
            named = f"stripe {note['stripe']}, parity member {note['parity_member']}: "
            fixed = [e for e in events if e[2] == REPAIRED and e[1] >= note["time"]
                     and str(e[6]).startswith(named)]
            note["repaired_step"] = int(min(fixed, key=lambda e: e[1])[0]) if fixed else None
        if "global_row" in note:
            fixed = [e for e in events if e[2] == REPAIRED and e[1] >= note["time"]
                     and (m := _REPAIRED_ROW.match(str(e[6]))) and int(m.group(1)) == note["global_row"]]
            note["repaired_step"] = int(min(fixed, key=lambda e: e[1])[0]) if fixed else None
        if "global_row" in note:  # the detection named the row, or a repair did
            note["located"] = note["repaired_step"] is not None or any(
                _names_row(str(e[6]), note["global_row"]) for e in later)
        in_memory = "global_row" in note or "parity_row" in note
        if note.get("repaired_step") is None and "step" in note and in_memory:
            # undone by a rollback past it: a recovery after it that resumed at or before its step
            back = [e for e in events if e[2] == RESUMED and e[1] >= note["time"]
                    and (m := _RESUMED_AT.match(str(e[6]))) and int(m.group(1)) <= note["step"]]
            note["repaired_step"] = int(min(back, key=lambda e: e[1])[0]) if back else None


def describe(record: dict[str, Any]) -> str:
    """One line for a fired flip's note: what it hit."""
    part = "weights" if record.get("part") == "weight" else "optimizer state"
    if "parity_row" in record:
        return (f"{record['plan']}: bit {record['bit']} of parity row {record['parity_row']} (stripe "
                f"{record['stripe']}, parity member {record['parity_member']}) on {record['role']}:"
                f"{record['index']} at step {record['step']}")
    if "message" in record:
        return (f"{record['plan']}: bit {record['bit']} of element {record['element']} of the gradient "
                f"message {record['role']}:{record['index']} sent at step {record['step']} (in transit, to "
                f"server {record['server']}): {record['before']:.6g} -> {record['after']:.6g}")
    if "file" in record:
        return (f"{record['plan']}: bit {record['bit']} of element {record['element']} of {record['file']} "
                f"(the checkpoint of step {record['checkpoint_step']}, at rest) on "
                f"{record['role']}:{record['index']}'s disk at step {record['step']}")
    if "global_row" in record:
        where = (f"table {record['table']} row {record['row']} (global row {record['global_row']}) "
                 f"col {record['col']} of its {part}")
    else:
        where = f"dense parameter {record['param']}" + ("" if part == "weights" else f"'s {part}")
    return (f"{record['plan']}: bit {record['bit']} of {where} on {record['role']}:{record['index']} at step "
            f"{record['step']}: {record['before']:.6g} -> {record['after']:.6g}")


__all__ = [
    "DETECTIONS", "MESSAGE_CORRUPT", "PREFIX", "RESUMED", "REFUSED", "REPAIRED", "REPLICA_MISMATCH",
    "REPLICA_REPAIR", "Corrupter", "Flip", "Holder", "describe", "flip_bit", "is_flip", "mark_detections",
    "notes_dir", "parse_flip", "parse_flips", "place", "read_notes", "repair_detail", "state_columns",
    "write_note"
]
