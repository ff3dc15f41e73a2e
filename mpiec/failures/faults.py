"""Kill plans: parsing, validation, and fault injection on each rank (``Injector``).

Owns the kill-plan syntax (docs/running.md "Kill plans"), the kills armed on a rank for the slot it holds, the
victims' notes and the act of dying. Invariants:

* a plan names a *role slot* (``server:2``) as the run was launched, not a world rank:
  after a spare (or a spawned process) takes over ``server:2`` a later kill of ``server:2``
  hits the replacement; after a shrink renumbers the survivors (``layout.replacement =
  "shrink"``) each keeps its launch name (the server launched as ``server:2`` and now
  ``server:1`` is still hit by ``server:2``'s kills), a dropped slot's kills cannot fire
  (until a growth gives its name to a new process) and are reported as not fired
  (``unfired_kills``); the runtime keeps the names (``RankContext.names``);
* a node plan (``node:1``) names the processes of a node (``layout.rank_nodes``):
  every one of them dies at the same planned point, each by its own ``SIGKILL``,
  whatever slot it holds by then (the monitor never: it belongs to no node's kill);
  the launcher's daemon on the node stays, the failure Open MPI 5.0.x survives;
* every rank expands the same plans to the same concrete kills (``random``
  plans are a pure function of their seed), so no coordination is needed;
* a victim dies by ``SIGKILL`` of its own process (never ``sys.exit``, which
  would run ``MPI_Finalize`` and can deadlock the survivors). In emulated mode
  (no ULFM) the victim instead stops participating and says so in-band.

Syntax (several plans: repeat ``--kill`` or separate with ``;``)::

    server:2@step=300       server 2 dies at the start of step 300
    server:2@step=300+5ms   server 2 dies 5 ms into step 300 (mid-step, from a timer armed
                            when the step starts: unlike @time, it fires at the same point
                            of training on a fast machine and on a loaded one)
    trainer:0@time=12.5     trainer 0 dies 12.5 s after training started
    parity:1@step=40        dedicated parity rank 1 (needs layout.parity_ranks)
    spare:0@time=3          spare 0 dies while it waits (or while it is promoted)
    node:1@step=40          every rank of node 1 dies at the start of step 40
    server:1@end            server 1 dies when training is over, before it hands in its
                            final report (real failures only: checks that a late death
                            still leaves a result file)
    random:mtbf=60s,seed=7  exponential inter-arrival times, uniform victims
                            among servers and trainers (optional
                            targets=server+trainer+parity+spare+node, max=N kills)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from mpiec.config.limits import MAX_SECONDS
from mpiec.errors import KillPlanError
from mpiec.layout import node_count

if TYPE_CHECKING:
    from mpiec.config import Config
    from mpiec.layout import Slot

KILLABLE_ROLES = ("server", "trainer", "parity", "spare", "node")  # "node": every rank of a node
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"  # 12, 1.5, .5, 2e3; not 1e, ., +
_FIXED = re.compile(r"^([a-z]+):([0-9]+)@(?:(step|time)=(.*)|(end))$")
_DURATION = re.compile(rf"^({_NUMBER})\s*(ms|s|m|min|h)?$")
_UNITS = {None: 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
RANDOM_MAX_KILLS = 64  # default max of a random plan
RANDOM_KILLS_LIMIT = 10_000  # max is bounded by this and by training.steps: parsing stays cheap
_MAX_DIGITS = 18  # step and index values fit an int64 (and int() never meets its digit limit)
_SEED_LIMIT = 2**63


@dataclass(frozen=True)
class Kill:
    """One concrete planned death of whichever rank holds ``role:index``."""

    role: str
    index: int
    step: int | None = None
    time: float | None = None  # seconds since training started
    seq: int = 0  # position in the expanded plan: two equal plans are two kills
    after: float = 0.0  # with ``step``: seconds into that step (a mid-step kill)
    at_end: bool = False  # ``@end``: after the last step, before the final report (no step, no time)

    def __str__(self) -> str:
        if self.at_end:
            return f"{self.role}:{self.index}@end"
        when = f"step={self.step}" if self.step is not None else f"time={self.time:g}"
        if self.after:
            when += f"+{self.after * 1e3:g}ms" if self.after < 1 else f"+{self.after:g}s"
        return f"{self.role}:{self.index}@{when}"


def _show(text: str) -> str:
    """A plan as it goes into a one-line message: control characters escaped."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _seconds(text: str) -> float | None:
    """``12.5``, ``2ms``, ``60 s``, ``1.5h`` -> seconds; None when not of that form or not finite."""
    m = _DURATION.match(text.strip())
    if not m:
        return None
    value = float(m.group(1)) * _UNITS[m.group(2)]
    return value if math.isfinite(value) else None


def _within_limit(value: float, text: str, what: str) -> float:
    """``value`` (seconds), refused past ``MAX_SECONDS`` like ``failures.timeout_s``: a timer
    cannot be armed that far (``OverflowError`` in the victim's timer thread, mid-run)."""
    if value > MAX_SECONDS:
        raise KillPlanError(f"{what} must be at most {MAX_SECONDS:.0e} s (about 32 years), "
                            f"got '{_show(text)}'")
    return value


def parse_duration(text: str, what: str) -> float:
    value = _seconds(text)
    if value is None:
        raise KillPlanError(f"{what}: '{_show(text)}' is not a duration (e.g. 60s, 500ms, 2m, 1h)")
    if value <= 0:
        raise KillPlanError(f"{what}: duration must be > 0, got '{_show(text)}'")
    return _within_limit(value, text, what)


def _role_count(role: str, cfg: Config) -> int:
    lay = cfg.layout
    if role == "node":
        return node_count(cfg.n_ranks, lay.ranks_per_node)
    return {"server": lay.servers, "trainer": lay.trainers, "parity": lay.parity_ranks,
            "spare": lay.spares}[role]


def _parse_random(plan: str, body: str, cfg: Config) -> list[Kill]:
    shown = _show(plan)
    opts: dict[str, str] = {}
    for item in body.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise KillPlanError(f"kill plan '{shown}': expected key=value, got '{_show(item)}'")
        if key in opts:
            raise KillPlanError(f"kill plan '{shown}': option '{_show(key)}' is given twice")
        opts[key] = value
    unknown = set(opts) - {"mtbf", "seed", "targets", "max"}
    if unknown:
        raise KillPlanError(f"kill plan '{shown}': unknown option '{_show(sorted(unknown)[0])}' "
                            "(use mtbf, seed, targets, max)")
    if "mtbf" not in opts:
        raise KillPlanError(f"kill plan '{shown}': random plans need mtbf=<duration>")
    mtbf = parse_duration(opts["mtbf"], f"kill plan '{shown}': mtbf")
    seed_text = opts.get("seed", "0")
    if not seed_text.isascii() or not seed_text.isdigit() or len(seed_text) > 19 \
            or int(seed_text) >= _SEED_LIMIT:
        raise KillPlanError(f"kill plan '{shown}': seed must be a whole number in [0, 2^63), "
                            f"got '{_show(seed_text)}'")
    seed = int(seed_text)
    limit = min(RANDOM_KILLS_LIMIT, cfg.training.steps)
    max_text = opts.get("max", str(min(RANDOM_MAX_KILLS, limit)))
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", max_text):
        raise KillPlanError(f"kill plan '{shown}': max must be a whole number, got '{_show(max_text)}'")
    max_kills = int(max_text)
    if max_kills < 1:
        raise KillPlanError(f"kill plan '{shown}': max must be >= 1, got {max_kills}")
    if max_kills > limit:
        raise KillPlanError(f"kill plan '{shown}': max must be <= {limit}, got {max_kills} "
                            f"(a run has at most one kill per step, training.steps = "
                            f"{cfg.training.steps}, and at most {RANDOM_KILLS_LIMIT})")
    targets = opts["targets"].split("+") if "targets" in opts else ["server", "trainer"]
    for role in targets:
        if role not in KILLABLE_ROLES:
            raise KillPlanError(f"kill plan '{shown}': unknown target role '{_show(role)}' "
                                f"(use {'+'.join(KILLABLE_ROLES)})")
    slots = [(role, i) for role in dict.fromkeys(targets) for i in range(_role_count(role, cfg))]
    if not slots:
        raise KillPlanError(f"kill plan '{shown}': the layout has no ranks of roles {targets}")
    rng = np.random.default_rng(seed)
    kills, t = [], 0.0
    for _ in range(max_kills):
        t += float(rng.exponential(mtbf))
        role, index = slots[int(rng.integers(len(slots)))]
        kills.append(Kill(role, index, time=round(t, 6)))
    return kills


def parse_kill_plan(plan: str, cfg: Config) -> list[Kill]:
    """Parse one plan string into concrete kills, validated against the layout."""
    text = plan.strip()
    shown = _show(plan)
    if text.startswith("random:"):
        return _parse_random(plan, text[len("random:"):], cfg)
    m = _FIXED.match(text)
    if not m or m.group(1) not in KILLABLE_ROLES:
        raise KillPlanError(
            f"malformed kill plan '{shown}': expected ROLE:INDEX@step=N, ROLE:INDEX@time=SECONDS or "
            f"ROLE:INDEX@end (ROLE is {', '.join(KILLABLE_ROLES)}) or random:mtbf=60s,seed=7")
    role, index, kind, value, end = m.groups()
    count = _role_count(role, cfg)
    idx = int(index) if len(index) <= _MAX_DIGITS else count
    if idx >= count and role == "node":
        lay = cfg.layout
        workers = cfg.n_ranks - 1
        how = (f"layout.ranks_per_node = {lay.ranks_per_node} groups its {workers} ranks after the monitor"
               if lay.ranks_per_node else
               f"without layout.ranks_per_node each of its {workers} ranks after the monitor is a node")
        raise KillPlanError(f"kill plan '{shown}': node:{_show(index)} does not exist (the layout has "
                            f"{count} node{'s' if count != 1 else ''}, 0 to {count - 1}: {how})")
    if idx >= count:
        have = f"only {count} {role} rank{'s' if count != 1 else ''}" if count else f"no {role} ranks"
        raise KillPlanError(f"kill plan '{shown}': {role}:{_show(index)} does not exist "
                            f"(the layout has {have})")
    if end:
        if cfg.failures.mode == "emulated":
            raise KillPlanError(f"kill plan '{shown}': @end needs real failures (ULFM), not failures.mode "
                                "= 'emulated': an emulated victim cannot die in the final report")
        return [Kill(role, idx, at_end=True)]
    if kind == "step":
        value, plus, offset = value.partition("+")
        if not re.fullmatch(r"[0-9]+", value):
            raise KillPlanError(f"kill plan '{shown}': step must be a whole number, got '{_show(value)}'")
        if len(value) > _MAX_DIGITS or int(value) >= cfg.training.steps:
            raise KillPlanError(f"kill plan '{shown}': step {_show(value)} is not before the last step "
                                f"(training.steps = {cfg.training.steps})")
        after = _seconds(offset) if plus else 0.0
        if after is None:
            raise KillPlanError(f"kill plan '{shown}': the time into the step after '+' must be a number "
                                f"of seconds >= 0 with an optional unit (e.g. step=40+5ms), got "
                                f"'{_show(offset)}'")
        after = _within_limit(after, offset, f"kill plan '{shown}': the time into the step")
        return [Kill(role, idx, step=int(value), after=after)]
    seconds = _seconds(value)
    if seconds is None:
        raise KillPlanError(f"kill plan '{shown}': time must be a number of seconds >= 0 with an "
                            f"optional unit (e.g. 12.5, 500ms, 2m), got '{_show(value)}'")
    return [Kill(role, idx, time=_within_limit(seconds, value, f"kill plan '{shown}': time"))]


def parse_kill_plans(plans: list[str], cfg: Config) -> list[Kill]:
    """Every plan of ``--kill`` / ``failures.kill``; ``;`` separates plans inside one string.

    An empty plan (``--kill ''``, ``';;'``, ``'a;;b'``) is refused: it is a mistake, not "no kill".
    A ``flip:`` plan is a silent corruption, not a kill (``mpiec.failures.corruption``): skipped here.
    """
    from mpiec.failures.corruption import is_flip

    kills: list[Kill] = []
    for plan in plans:
        if not isinstance(plan, str):
            raise KillPlanError(f"kill plan {plan!r} is not a string")
        for part in plan.split(";"):
            if not part.strip():
                raise KillPlanError(f"kill plan '{_show(plan)}' has an empty plan "
                                    "(plans are separated by ';'; leave --kill out for no kill)")
            if is_flip(part):
                continue
            kills.extend(parse_kill_plan(part, cfg))
    return kills


def unshrinkable_kill(kills: list[Kill], cfg: Config, refusal: str) -> str:
    """``layout.replacement = "shrink"`` under a strategy that cannot restore rows onto fewer
    servers (``refusal``, its ``Strategy.shrink_refusal``; "" when it can): the refusal naming the
    first kill that may take a server with no spare left, or "". A kill may take a server when it
    names one, a node (whatever its ranks hold by then) or draws among them (``random``); the spares
    run out when the plan has more kills than ``layout.spares`` (each kill may use one)."""
    if not refusal or cfg.layout.replacement != "shrink" or len(kills) <= cfg.layout.spares:
        return ""
    hit = next((k for k in kills if k.role in ("server", "node")), None)
    if hit is None:
        return ""
    return f"kill plan '{hit}' may kill a server with no spare left: {refusal}"


def kills_before(kills: list[Kill], first_step: int) -> list[Kill]:
    """The step kills of ``kills`` planned before ``first_step``: a run that starts there (``--resume``)
    never reaches their step, so they would never fire."""
    return [k for k in kills if k.step is not None and k.step < first_step]


def kills_for(kills: list[Kill], role: str, index: int, node: int | None) -> list[Kill]:
    """The kills that hit the process holding slot ``role:index`` on ``node`` (None: no node kill
    applies to it, as for the monitor)."""
    return [k for k in kills if (k.role == role and k.index == index)
            or (node is not None and k.role == "node" and k.index == node)]


def unfired_kills(kills: list[Kill], fired: set[int], held: set[Slot], lost: bool,
                  shrink: bool) -> list[tuple[Kill, str]]:
    """The planned ``kills`` that did not fire (their ``seq`` not in ``fired``), each with why:
    its name held by no rank at the end (``held``: ``RankContext.names`` of the final table; a slot
    dropped by a shrink, a spare promoted), the run lost first, or ended before the kill was due."""
    out = []
    for k in kills:
        if k.seq in fired:
            continue
        name = f"{k.role}:{k.index}"
        if k.role != "node" and all((s.role, s.index) != (k.role, k.index) for s in held):
            if k.role == "spare":
                why = f"{name} was promoted to a dead slot before it (or died)"
            elif shrink and k.role in ("trainer", "server"):
                why = f"no rank holds {name} any more: a shrink dropped it (layout.replacement = shrink)"
            else:
                why = f"no rank holds {name} any more"
        elif lost:
            why = "the run was lost before it"
        else:
            why = "the run ended before it was due"
        out.append((k, why))
    return out


def die_now() -> None:
    """End this process the way a crash would: no cleanup, no MPI_Finalize."""
    os.kill(os.getpid(), signal.SIGKILL)


class KillSwitch:
    """The kills planned for the role slot this rank currently holds, and for its node.

    ``due(step, now)`` is called at each step boundary and returns the kill due
    (ULFM mode dies inside it). Time kills, and step kills with a time into the
    step (``step=40+5ms``), fire from a timer thread so a rank can die mid-step,
    as a real crash does; in emulated mode they are reported at a step boundary
    instead (the next one, or the planned step's start). ``node``: the node of
    this process (None: no node kill applies, as for the monitor).
    """

    def __init__(self, kills: list[Kill], role: str, index: int, real: bool, t0: float,
                 on_fire: Callable[[Kill], None] | None = None, node: int | None = None) -> None:
        self.real = real
        mine = kills_for(kills, role, index, node)
        self.steps: dict[int, Kill] = {}
        for k in sorted((k for k in mine if k.step is not None), key=lambda k: k.seq):
            self.steps.setdefault(k.step, k)  # type: ignore[arg-type]
        self.times = sorted((k for k in mine if k.time is not None), key=lambda k: k.time or 0.0)
        self.t0 = t0
        self.on_fire = on_fire
        self._timer: threading.Timer | None = None  # the first time kill's
        self._in_step: threading.Timer | None = None  # a step kill's time into its step
        if real and self.times:
            import time

            delay = max(0.0, (self.times[0].time or 0.0) - (time.monotonic() - t0))
            self._timer = self._arm(self.times[0], delay)

    def _arm(self, kill: Kill, delay: float) -> threading.Timer | None:
        if delay > threading.TIMEOUT_MAX:
            # A random plan's later kills add up past what a timer takes (its thread would die of
            # OverflowError); no run lasts that long (failures.timeout_s <= MAX_SECONDS), so none fires.
            return None

        def fire() -> None:
            if self.on_fire is not None:
                self.on_fire(kill)
            die_now()

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        timer.start()
        return timer

    def due(self, step: int, now: float) -> Kill | None:
        """The kill due at the start of ``step`` (``now`` is monotonic time).

        A step kill with a time into the step arms its timer here (ULFM) and returns None."""
        if step in self.steps:
            kill = self.steps[step]
            if not (self.real and kill.after):
                return kill
            if self._in_step is None:
                self._in_step = self._arm(kill, kill.after)
            return None
        if self._timer is not None:
            return None  # the timer thread owns time kills (it may fire mid-step)
        if self.times and (now - self.t0) >= (self.times[0].time or 0.0):
            return self.times[0]
        return None

    def cancel(self) -> None:
        for timer in (self._timer, self._in_step):
            if timer is not None:
                timer.cancel()


class _Progress(Protocol):
    current_step: int


class Victim(Protocol):
    """What fault injection reads of its rank (``roles.context.RankContext``)."""

    ulfm: bool
    first_rank: int
    out_path: Path
    run_id: str
    nodes: list[int]
    holders: dict[Slot, int]
    gone: set[int]
    procs: list[tuple[str, int]]

    @property
    def progress(self) -> _Progress: ...
    @property
    def slot(self) -> Slot: ...
    @property
    def kill_name(self) -> Slot: ...
    @property
    def rank(self) -> int: ...
    @property
    def node(self) -> int: ...
    def now(self) -> float: ...
    def event(self, kind: str, step: int, rank: int = -1, slot: Slot | None = None,
              detail: str = "", at: float | None = None) -> None: ...


class Injector:
    """Fault injection on one rank: the run's planned kills (``kills``, numbered by ``seq``), the
    ones that fired (``consumed``, the same on every rank after a recovery) and the switch armed
    for the slot this rank holds now.

    Invariants: a kill fires at most once in a run (``consumed`` travels with the recovery plan and
    the spawn payload); a victim leaves a note with its kill's time before it dies (the monitor
    cannot hear from it); the monitor is never a victim.
    """

    def __init__(self, victim: Victim, kills: list[Kill]) -> None:
        self.victim = victim
        self.kills = [dataclasses.replace(k, seq=i) for i, k in enumerate(kills)]
        self.consumed: set[int] = set()  # seq of the planned kills that fired
        self.switch: KillSwitch | None = None  # the kills armed for the slot this rank holds

    @property
    def armed(self) -> bool:
        return self.switch is not None

    @property
    def node(self) -> int | None:
        """The node whose node kills hit this process (None: none, e.g. the monitor, which never dies)."""
        v = self.victim
        return v.node if v.slot.role != "monitor" and v.node >= 0 else None

    def by_step(self, *roles: str) -> bool:
        """A kill planned by step targets one of ``roles`` (ranks outside the step loop then poll
        the run's progress often enough to fire it)."""
        return any(k.role in roles and k.step is not None for k in self.kills)

    def arm(self) -> None:
        """Arm the kills planned for this rank's slot (by its name, ``Victim.kill_name``) that have
        not fired yet (replacing any)."""
        self.disarm()
        v = self.victim
        t0_mono = time.monotonic() - v.now()
        live = [k for k in self.kills if k.seq not in self.consumed]
        name = v.kill_name
        self.switch = KillSwitch(live, name.role, name.index, real=v.ulfm, t0=t0_mono,
                                 on_fire=lambda kill: self.record_own_death(kill, v.progress.current_step),
                                 node=self.node)

    def disarm(self) -> None:
        if self.switch is not None:
            self.switch.cancel()
            self.switch = None

    def fire_if_due(self, step: int) -> bool:
        """At a step boundary: die if a kill is due (ULFM); True if this rank now plays dead
        (emulated: it announces its death in the step header)."""
        if self.switch is None:
            return False
        kill = self.switch.due(step, time.monotonic())
        if kill is None:
            return False
        v = self.victim
        self.record_own_death(kill, step)
        if v.ulfm:
            die_now()
        v.event("emulated_kill", step, v.rank, detail=str(kill))
        return True

    def die_if_killed_at_end(self) -> None:
        """A kill planned ``@end`` for this rank's slot (or node) fires here: training is over and
        the final report not handed in. Called once per rank, after training, before the report.
        Real failures only (the plan is refused with emulated failures; without ULFM it says so)."""
        v = self.victim
        if v.slot.role == "monitor":
            return
        for kill in kills_for(self.kills, v.kill_name.role, v.kill_name.index, self.node):
            if not kill.at_end or kill.seq in self.consumed:
                continue
            if not v.ulfm:
                print(f"[mpiec] warning: kill {kill} not fired: @end needs ULFM (real failures)",
                      file=sys.stderr, flush=True)
                return
            self.record_own_death(kill, v.progress.current_step)
            die_now()

    def record_own_death(self, kill: Kill, step: int) -> None:
        """Leave the kill's timestamp where the monitor finds it (the victim cannot send); a node
        kill (ULFM) takes the node's other processes first, so the node dies at once."""
        v = self.victim
        if kill.role == "node" and v.ulfm:
            self.kill_node_peers(kill, step)
        self.write_note(kill, step, v.first_rank, v.slot)

    def write_note(self, kill: Kill, step: int, rank: int, slot: Slot) -> None:
        v = self.victim
        d = kill_notes_dir(v.out_path, v.run_id)
        d.mkdir(parents=True, exist_ok=True)
        rec = {"step": step, "at_end": kill.at_end, "time": v.now(), "rank": rank, "role": slot.role,
               "index": slot.index, "plan": str(kill), "seq": kill.seq}
        tmp = d / f".{rank}.{os.getpid()}.tmp"  # the victim may write its own note at the same time
        tmp.write_text(json.dumps(rec))
        tmp.replace(d / f"{rank}.json")  # atomic: the monitor never reads half a note

    def kill_node_peers(self, kill: Kill, step: int) -> None:
        """SIGKILL the other live processes of this node on this host (never the monitor).

        Each of them would die of the same kill on its own, but only when it reaches the
        planned step itself (up to a step later): a node fails at once."""
        v = self.victim
        host = v.procs[v.first_rank][0] if v.first_rank < len(v.procs) else None
        for slot, r in sorted(v.holders.items(), key=lambda item: item[1]):
            if r == v.first_rank or r in v.gone or slot.role == "monitor" or not 0 <= r < len(v.procs):
                continue
            peer_host, pid = v.procs[r]
            if v.nodes[r] != kill.index or peer_host != host or not is_worker(pid):
                continue
            self.write_note(kill, step, r, slot)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def is_worker(pid: int) -> bool:
    """``pid`` is a live mpiec worker (not a recycled pid: a node kill must not hit a stranger)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"mpiec.worker" in f.read()
    except OSError:
        return False


def kill_notes_dir(out_path: Path, run_id: str) -> Path:
    """Where victims of one run leave their notes (the run's token keeps runs apart)."""
    return out_path.parent / f".{out_path.stem}.{run_id}.kills"
