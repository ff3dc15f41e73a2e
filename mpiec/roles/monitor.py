"""Monitor role (world rank 0): progress, metrics and the result file.

Owns the run's HDF5 result file and the progress lines users see. During
training it only listens to trainer 0 (one ordered stream: timeline chunks,
evaluations, done), so it costs the step loop nothing; at the end every
surviving rank hands it a final report through one gather.

Invariants: the monitor is never a kill target; it writes the result file
exactly once, whatever happened (normal end, lost run, emulated failure); the
parameter checksum is computed only when every shard and the dense replica
reported and no rank crashed (otherwise it is empty, and ``lost`` or ``crashed`` is true: a rank
that died of an exception left a crash note, ``mpiec.failures.crashes``, and the run is ``crashed``, never
``lost``).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from mpiec import __version__
from mpiec.comm import guard, mpi_library, recv
from mpiec.data.factory import make_source
from mpiec.failures.corruption import (
    describe,
    event_row,
    kept_dir,
    mark_detections,
    notes_dir,
    read_kept_events,
    read_notes,
)
from mpiec.failures.crashes import crash_line, crash_notes_dir, run_crash_notes
from mpiec.failures.faults import kill_notes_dir, unfired_kills
from mpiec.results import RANKS_DTYPE, ResultWriter
from mpiec.results.accounting import (
    cpu_per_step,
    embedding_weights,
    layout_throughput,
    merge_timelines,
    param_checksum,
    recovery_breakdown,
    reexecuted_steps,
    stall_losses,
    summary_efficiency,
    unique_steps,
)
from mpiec.roles.context import (
    TAG_CONTROL,
    TAG_DONE,
    TAG_EVAL,
    TAG_FAILURE,
    TAG_STEPS,
    TAG_STRATEGY,
    RankContext,
)
from mpiec.roles.exchange import EmulatedFailure
from mpiec.strategies.api.base import merge_summaries
from mpiec.strategies.api.plan import RecoveryPlan, Scope

if TYPE_CHECKING:
    from mpiec.config import Config

WARMUP_STEPS = 5


def git_commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def detector_settings(cfg: Config, ulfm: bool) -> dict[str, Any]:
    """How failures are detected (the result's ``detector`` attribute)."""
    if not ulfm:
        return {"mechanism": "emulated: victim announces its death in the step header"}
    f = cfg.failures
    if f.detector != "heartbeat":
        return {"mechanism": "ULFM MPI_ERR_PROC_FAILED"}
    return {"mechanism": "ULFM MPI_ERR_PROC_FAILED + heartbeat (mpi_ft_detector)",
            "heartbeat_period_s": f.heartbeat_period_s, "heartbeat_timeout_s": f.heartbeat_timeout_s}


def _mean_finite(values: list[float]) -> float:
    """The mean of the finite values (nan when none)."""
    vals = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return float(np.mean(vals)) if vals else math.nan


def say(text: str) -> None:
    print(f"[mpiec] {text}", flush=True)


def throughput(tl: np.ndarray) -> float:
    """Samples/s over the timeline, excluding the first steps (warm-up)."""
    if len(tl) <= WARMUP_STEPS + 1:
        if len(tl) == 0:
            return math.nan
        return float(tl["samples"].sum() / max(tl["dt"].sum(), 1e-12))
    part = tl[WARMUP_STEPS:]
    span = float(part["t_end"][-1] - tl["t_end"][WARMUP_STEPS - 1])
    return float(part["samples"].sum() / span) if span > 0 else math.nan


class Monitor:
    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        lib, version = mpi_library()
        import h5py
        import numba

        attrs = {
            "config": cfg.to_json(), "strategy": cfg.strategy.name, "seed": cfg.training.seed,
            "preset": cfg.preset, "mpi_library": lib, "mpi_version": version,
            "ulfm": ctx.ulfm, "failure_mode": "ulfm" if ctx.ulfm else "emulated",
            "detector": json.dumps(detector_settings(cfg, ctx.ulfm)),
            "mpiec_version": __version__, "git_commit": git_commit(),
            "numba_version": numba.__version__, "h5py_version": h5py.__version__,
            "n_ranks": ctx.comms.world.Get_size(),
            "variant": cfg.variant,
        }
        self.writer = ResultWriter(ctx.out_path, attrs)
        self.next_print = ctx.cfg.training.log_every  # progress at multiples of log_every
        self.unprinted = 0  # progress messages since the last line
        # spares die of step kills when they hear of the step: theirs, or their node's
        self.relay_steps = ctx.faults.by_step("spare", "node")
        self.timeline: list[np.ndarray] = []
        self.noted_kills: set[int] = set()  # ``seq`` of the kills whose victims left a note
        self.evals: list[tuple] = []
        self.source = make_source(cfg)
        self.teacher_auc = float(self.source.teacher_auc(cfg.data.eval_samples))
        say(f"{cfg.preset} preset, strategy {cfg.strategy.name}, {ctx.comms.world.Get_size()} ranks "
            f"({cfg.layout.trainers} trainers, {cfg.layout.servers} servers, {cfg.layout.spares} spares), "
            f"{cfg.training.steps} steps of {cfg.global_batch} samples; failures "
            f"{self.failure_label()}; teacher AUC {self.teacher_auc:.4f}")

    def failure_label(self) -> str:
        if self.ctx.ulfm:
            return "ULFM"
        if self.ctx.cfg.failures.mode == "emulated":
            return "EMULATED (failures.mode = emulated)"
        return "EMULATED (this MPI has no active ULFM)"

    def run(self) -> None:
        ctx, cfg = self.ctx, self.ctx.cfg
        self.start_disturbance()
        status = MPI.Status()
        while True:
            msg = recv(ctx.comms.world, MPI.ANY_SOURCE, MPI.ANY_TAG, "monitor receive", status=status)
            tag = status.Get_tag()
            if tag == TAG_STRATEGY:
                slot, payload = msg
                ctx.coordinator().on_message(slot, payload)
            elif tag == TAG_STEPS:
                self.timeline.append(msg)
                last = msg[-1]
                ctx.progress.current_step = max(ctx.progress.current_step, int(last["step"]) + 1)
                if self.relay_steps:
                    self.notify_spares(("step", int(last["step"]) + 1))
                self.unprinted += 1
                if int(last["step"]) + 1 < self.next_print and len(msg) < cfg.training.log_every:
                    continue
                every = cfg.training.log_every  # records may come one step at a time
                self.next_print = (int(last["step"]) + 1) // every * every + every
                recent = np.concatenate(self.timeline[-self.unprinted:])  # the steps since the last line
                self.unprinted = 0
                rate = float(recent["samples"].sum() / max(recent["dt"].sum(), 1e-12))
                done, t = int(last["step"]) + 1, float(last["t_end"])
                eta = t / done * (cfg.training.steps - done)  # evaluations included, roughly
                say(f"step {done:>7}/{cfg.training.steps}  {rate:>10,.0f} samples/s  "
                    f"loss {float(recent['loss'].mean()):.4f}  t={t:.1f}s  eta {eta:.0f}s")
            elif tag == TAG_EVAL:
                self.evals = [e for e in self.evals if e[0] != msg[0]] + [msg]
                say(f"eval after step {msg[0] + 1}: AUC {msg[2]:.4f} (teacher {self.teacher_auc:.4f})  "
                    f"logloss {msg[3]:.4f}  accuracy {msg[4]:.4f}")
            elif tag == TAG_FAILURE:
                self.notify_spares(("failure", msg))
                raise EmulatedFailure(*msg)
            elif tag == TAG_DONE:
                self.notify_spares(("stop", None))
                return

    def start_disturbance(self) -> None:
        """Sample the host's CPU at the start of training (once: ``run`` is re-entered after a recovery)."""
        if getattr(self, "disturbance", None) is None:
            from mpiec.roles.disturbance import DisturbanceProbe

            self.disturbance = DisturbanceProbe([pid for _, pid in self.ctx.procs])
            self.disturbance.start()

    def disturbance_summary(self, tl: np.ndarray) -> dict[str, Any]:
        """The summary's disturbance keys (``mpiec.roles.disturbance``); nan before training started."""
        from mpiec.roles.disturbance import DisturbanceProbe

        probe = getattr(self, "disturbance", None) or DisturbanceProbe([])
        return probe.summary(tl["dt"] if len(tl) else None)

    def notify_spares(self, msg: Any) -> None:
        for r, slot in enumerate(self.ctx.slots):
            if slot.role == "spare":
                with guard("spare notice"):
                    self.ctx.comms.world.send(msg, dest=r, tag=TAG_CONTROL)

    def after_recovery(self, plan: RecoveryPlan) -> None:
        """Evaluations after the restored step will be redone; say what happened."""
        assert plan.scope is not None  # the plan of a completed recovery does not abort
        self.evals = [e for e in self.evals if e[0] <= plan.restored]
        self.ctx.progress.current_step = plan.restored + 1
        self.next_print = 0
        replaced = ", ".join([f"{a} -> {b}" for a, b in plan.assignments.items()] +
                             [f"spawned -> {b}" for b in plan.spawn]) or "no replacement"
        if plan.grow_short:  # layout.grow_from = "spares" with too few spares waiting
            self.ctx.event("grow_short", plan.step, self.ctx.rank, detail=plan.grow_short[:250])
            say(f"note: {plan.grow_short}")
        if plan.grow:
            say(f"{plan.reason}: {replaced}; training resumes at step {plan.restored + 1}")
            return
        dropped = f", went on without {', '.join(map(str, plan.dropped))}" if plan.dropped else ""
        died = plan.failure is not None and plan.failure.dead
        if plan.reason and (plan.handover or (plan.dropped and plan.scope is Scope.ROLLBACK) or not died):
            dropped += f" ({plan.reason})"  # also for a failure no death caused: what did
        say(f"recovered ({plan.scope.value}): {replaced}{dropped}; training resumes at step "
            f"{plan.restored + 1}")

    def final_report(self) -> dict[str, Any]:
        return {}

    # -- the result file -----------------------------------------------------
    def write_lost_result(self, reason: str) -> Path:
        """The result of a run that cannot reach its final report (a spawn a death cut:
        ``spawn.SpawnWatch``, from its thread while this rank's main thread is stuck in MPI): lost,
        with what the monitor holds itself (the streamed timeline, evaluations, kill notes)."""
        return self.write_result([self.ctx.final_report(self)], "lost", reason)

    def write_result(self, reports: list[dict[str, Any]], outcome: str, reason: str = "") -> Path:
        ctx, cfg = self.ctx, self.ctx.cfg
        w = self.writer
        # A report whose role part is empty or partial (a spare promoted by a recovery that then
        # failed hands in a spare's report for its new slot) carries no model state: left out.
        trainers = sorted((r for r in reports if r["info"]["role"] == "trainer"
                           and {"timeline", "eval", "dense", "dense_digest"} <= set(r.get("role") or {})),
                          key=lambda r: r["info"]["role_index"])
        servers = {r["info"]["role_index"]: r for r in reports if r["info"]["role"] == "server"
                   and {"global_rows", "table"} <= set(r.get("role") or {})}
        # Every trainer's timeline (any survivor can report the run) and the streamed copy.
        parts = [r["role"]["timeline"] for r in trainers] + self.timeline
        tl = merge_timelines(parts)
        t0 = next((r for r in trainers if r["info"]["role_index"] == 0), None)
        evals = {int(e[0]): tuple(e) for e in self.evals}
        if t0 is not None and t0["role"]["eval"] is not None:
            evals.update({int(e[0]): tuple(e) for e in t0["role"]["eval"]})
        self.evals = [evals[k] for k in sorted(evals)]
        w.add_steps(tl)
        for e in self.evals:
            w.add_eval(*e)
        kills = self.kill_events()
        flips, flip_notes = self.corruptions()
        at_step = ctx.progress.current_step
        late = [(at_step, ctx.now(), "report_death", ctx.holders.get(s, -1), s.role, s.index,
                 "died during the final report, after training") for s in ctx.ledger.report_deaths]
        reported = [ev for r in reports for ev in r["events"]]
        seen = {event_row(ev) for ev in reported}  # a kept event of a rank that reported is there already
        kept = [ev for ev in read_kept_events(kept_dir(ctx.out_path, ctx.run_id)) if ev not in seen]
        events = sorted(kills + flips + late + reported + kept, key=lambda e: e[1])
        for ev in events:
            w.add_event(*ev)
        mark_detections(flip_notes, events)
        checkpoint_rows = list(ctx.coordinator().checkpoint_rows())
        for row in checkpoint_rows:
            w.add_checkpoint(*row)
        ranks = np.zeros(len(reports), dtype=RANKS_DTYPE)
        for i, r in enumerate(reports):
            info = r["info"]
            ranks[i] = (info["rank"], info["role"], info["role_index"], info["host"][:64], info["node"],
                        info["pid"], info["peak_rss_mb"], (r.get("role") or {}).get("shard_digest", ""),
                        info.get("cpu_s", math.nan))
        w.set_ranks(ranks)
        # every rank's host, the dead ones' too (a node failure may leave a host without survivors)
        w.set_attr("hosts", sorted({r["info"]["host"] for r in reports} | {h for h, _ in ctx.procs}))

        # a rank that died of an exception left a note (mpiec.failures.crashes): the run crashed,
        # it is not lost
        crashes = run_crash_notes(ctx.out_path, ctx.run_id)
        stopped = outcome != "done" or bool(crashes)
        lost = stopped and not crashes
        dense = {t["role"]["dense_digest"] for t in trainers}
        checksum = ""
        if not stopped and t0 is not None and len(servers) == ctx.n_servers:
            shards = [(servers[i]["role"]["global_rows"], servers[i]["role"]["table"])
                      for i in range(ctx.n_servers)]
            checksum = param_checksum(t0["role"]["dense"], shards, int(ctx.offsets[-1]))
            if checksum and ctx.cfg.output.final_model:
                w.set_final_model(t0["role"]["dense"][0], embedding_weights(shards, ctx.cfg.model.dim))
        steps_done = unique_steps(tl)
        if stopped and ctx.progress.current_step > steps_done:  # every trainer may be gone: the agreed step
            steps_done = ctx.progress.current_step
        # the failure-free extras of a step (not failure costs): its evaluation, its checkpoint's stall
        eval_steps = {int(e[0]) for e in self.evals}
        step_extra = {int(row[0]): float(row[6]) for row in checkpoint_rows
                      if len(row) > 6 and isinstance(row[6], int | float) and math.isfinite(row[6])}
        breakdown = recovery_breakdown([r.get("recoveries", []) for r in reports],
                                       [e[1] for e in kills], tl, events=events, eval_steps=eval_steps,
                                       step_extra=step_extra)
        stalls = stall_losses(tl, events, eval_steps, step_extra, [e[1] for e in kills])
        summary: dict[str, Any] = {
            "throughput_sps": throughput(tl),
            "teacher_auc": self.teacher_auc,
            "param_checksum": checksum,
            "steps_completed": steps_done,
            "samples_completed": int(tl["samples"].sum()) if len(tl) else 0,
            "lost": lost,
            "emulated": not ctx.ulfm and any(e[2] in ("kill", "emulated_kill") for e in events),
            "dense_replicas_consistent": len(dense) <= 1,
            "kills_fired": len(kills),
            **self.kills_unfired(lost),
            **self.corruption_summary(flip_notes),
            "recoveries": len(breakdown),
            "reexecuted_steps": reexecuted_steps(tl),
            **layout_throughput(tl),
            "time_lost_s": float(sum(b["time_lost_s"] for b in breakdown) +
                                 sum(x["time_lost_s"] for x in stalls)),
            "unprotected_s": float(sum(b["unprotected_s"] for b in breakdown)),
            "repair_throughput_ratio": _mean_finite([b["repair_throughput_ratio"] for b in breakdown]),
            "stall_time_lost_s": float(sum(x["time_lost_s"] for x in stalls)),
            "recovery_latency_s": float(np.mean([b["recovery_s"] for b in breakdown])) if breakdown
            else math.nan,
            "recovery_breakdown": json.dumps(breakdown),
        }
        if stalls:  # the MPIEC_STALL test hook fired: what each stall cost (mpiec.failures.stall)
            summary["stalls"] = json.dumps(stalls)
            summary["injected_stall_s"] = float(sum(x["stall_s"] for x in stalls))
        diverged = [t["role"]["diverged_at"] for t in trainers if t["role"].get("diverged_at") is not None]
        summary["diverged"] = bool(diverged)
        if diverged:
            summary["diverged_at_step"] = min(diverged)
        if crashes:
            summary["crashed"] = True
            summary["crash_reason"] = crash_line(crashes)
        elif reason:
            summary["abort_reason"] = reason
        if ctx.resume_from:
            summary["resumed_from_step"] = ctx.resumed_step
        if lost:
            summary["lost_samples"] = (cfg.training.steps - steps_done) * cfg.global_batch
        rules = type(ctx.strategy).summary_rules
        merge_problems: list[str] = []  # a key without a rule costs its merge, never the result file
        summary.update(merge_summaries(rules, [ctx.agent.summary()] +
                                       [r.get("strategy", {}) for r in reports[1:]], merge_problems))
        if merge_problems:
            summary["summary_merge_problems"] = "; ".join(merge_problems)
        # the writer's default for a strategy that records its saves only as checkpoint rows
        # (ecsnap's snapshots), needed before protection_bytes is derived from it
        summary.setdefault("checkpoint_bytes", int(sum(int(row[2]) for row in checkpoint_rows)))
        summary.update(summary_efficiency(summary, tl, stopped))
        summary.update(cpu_per_step(reports))
        summary.update(self.disturbance_summary(tl))
        path = w.close(summary)
        shutil.rmtree(crash_notes_dir(ctx.out_path, ctx.run_id), ignore_errors=True)  # read: served
        self.print_summary(summary, path, breakdown)
        return path

    def kills_unfired(self, lost: bool) -> dict[str, Any]:
        """``kills_planned`` and ``kills_unfired`` (JSON list of ``{"kill", "why"}``): every planned
        kill that never fired, e.g. one whose slot a shrink dropped (``faults.unfired_kills``)."""
        ctx = self.ctx
        fired = ctx.faults.consumed | self.noted_kills
        held = set(ctx.names.values())
        missed = unfired_kills(ctx.faults.kills, fired, held, lost, ctx.cfg.layout.replacement == "shrink")
        return {"kills_planned": len(ctx.faults.kills),
                "kills_unfired": json.dumps([{"kill": str(k), "why": why} for k, why in missed])}

    def corruptions(self) -> tuple[list[tuple], list[dict[str, Any]]]:
        """The planned silent corruptions (``flip:`` plans): a ``corrupted`` event per flip that fired,
        and every note the corrupting ranks left (what a flip hit, or why it did not fire)."""
        ctx = self.ctx
        notes = read_notes(notes_dir(ctx.out_path, ctx.run_id))
        events = [(n["step"], n["time"], "corrupted", n["rank"], n["role"], n["index"], describe(n))
                  for n in notes if n.get("fired")]
        return events, notes

    def corruption_summary(self, notes: list[dict[str, Any]]) -> dict[str, Any]:
        """When a flip was planned: ``corruptions_planned``, ``corruptions`` (JSON list of the fired
        flips' notes, with the first detection and repair after each), ``corruptions_detected`` and
        ``corruptions_repaired`` (how many of them a detection, a repair of their row followed) and
        ``corruptions_unfired`` (``{"flip", "why"}``)."""
        flips = self.ctx.flips.flips
        if not flips:
            return {}
        fired = [n for n in notes if n.get("fired")]
        noted = {n.get("seq") for n in notes}
        unfired = [{"flip": n["plan"], "why": n.get("why", "")} for n in notes if not n.get("fired")]
        unfired += [{"flip": str(f), "why": f"{f.target} did not reach step {f.step}"}
                    for f in flips if f.seq not in noted]
        return {"corruptions_planned": len(flips), "corruptions": json.dumps(fired),
                "corruptions_detected": sum(n.get("detected_step") is not None for n in fired),
                "corruptions_repaired": sum(n.get("repaired_step") is not None for n in fired),
                "corruptions_unfired": json.dumps(unfired)}

    def kill_events(self) -> list[tuple]:
        """Kill events from the victims' notes (a victim cannot send before dying)."""
        d = kill_notes_dir(self.ctx.out_path, self.ctx.run_id)
        out = []
        if d.is_dir():
            for f in sorted(d.iterdir()):
                if f.name.startswith("."):  # a note its writer did not finish: a node peer killed it first
                    f.unlink(missing_ok=True)
                    continue
                try:
                    k = json.loads(f.read_text())
                    # a victim that trains no steps (a spare, a parity rank) does not know the step
                    step = self.ctx.progress.current_step if k.get("at_end") else k["step"]
                    out.append((step, k["time"], "kill", k["rank"], k["role"], k["index"], k["plan"]))
                    if isinstance(k.get("seq"), int):
                        self.noted_kills.add(k["seq"])
                except (OSError, ValueError, KeyError) as exc:
                    say(f"warning: unreadable kill note {f.name}: {exc}")
                finally:
                    f.unlink(missing_ok=True)
            d.rmdir()
        return out

    def print_summary(self, s: dict[str, Any], path: Path, breakdown: list[dict[str, float]]) -> None:
        say(f"result: {path}")
        auc_label = "final AUC"
        if s["lost"] and self.evals:  # a lost run's last evaluation is not a final one
            auc_label = f"last eval AUC (after step {self.evals[-1][0] + 1})"
        fields = [("throughput", f"{s['throughput_sps']:,.0f} samples/s"),
                  ("steps", f"{s['steps_completed']}/{self.ctx.cfg.training.steps}"),
                  (auc_label, f"{self.evals[-1][2]:.4f}" if self.evals else "n/a"),
                  ("teacher AUC", f"{s['teacher_auc']:.4f}"),
                  ("lost", "yes" if s["lost"] else "no"),
                  ("checksum", s["param_checksum"][:16] or "n/a")]
        say("summary: " + ", ".join(f"{k} {v}" for k, v in fields))
        if "resumed_from_step" in s:
            say(f"resumed from the checkpoint of step {s['resumed_from_step']} ({self.ctx.resume_from})")
        if s.get("diverged"):
            say(f"training diverged: the loss became non-finite at step {s['diverged_at_step']} "
                "(lower training.lr / training.dense_lr)")
        if s.get("abort_reason"):
            say(f"the run was lost: {s['abort_reason']}")
        if s.get("crashed"):
            say(f"the run crashed: {s['crash_reason']} (its traceback is above)")
        for b in breakdown:
            if b.get("grow"):
                say(f"growth {b['epoch']}: {b['recovery_s']:.3f} s from trainer 0's signal to resume "
                    f"(shrink+agree {b['shrink_agree_s']:.3f}, plan {b['plan_s']:.3f}, new ranks and "
                    f"re-placement {b['replace_s']:.3f}, restore {b['restore_s']:.3f}); time lost "
                    f"{b['time_lost_s']:.3f} s")
                continue
            say(f"recovery {b['epoch']}: {b['recovery_s']:.3f} s from kill to resume (detection "
                f"{b['detection_s']:.3f}, shrink+agree {b['shrink_agree_s']:.3f}, plan {b['plan_s']:.3f}, "
                f"replacement {b['replace_s']:.3f}, restore {b['restore_s']:.3f}); back to normal speed "
                f"{b['back_to_normal_s']:.3f} s later")
            ratio = b["repair_throughput_ratio"]
            during = f", throughput during the repair {ratio:.0%} of the pre-failure rate" \
                if math.isfinite(ratio) else ""
            say(f"recovery {b['epoch']}: time lost {b['time_lost_s']:.3f} s, unprotected "
                f"{b['unprotected_s']:.3f} s{during}")
        for x in json.loads(s.get("stalls", "[]")):
            say(f"stall at step {x['step']}: {x['stall_s']:.3f} s injected, {x['time_lost_s']:.3f} s of "
                f"time lost measured (steps {x['window_steps']})")
        if s["kills_planned"] and not s["kills_fired"]:
            say("note: no planned kill fired before the run ended (see failures.kill)")
        for n in json.loads(s.get("corruptions", "[]")):
            found = (f"detected at step {n['detected_step']} ({n['detected_by']}, "
                     f"{n['detected_step'] - n['step']} steps later)" if n.get("detected_step") is not None
                     else "nothing in the run detected it")
            if n.get("repaired_step") is not None:
                found += f", its row repaired at step {n['repaired_step']}"
            say(f"silent corruption: {describe(n)}; {found} (whether it persisted into the final model: "
                "compare param_checksum with a failure-free run, as mpiec bench does with each run's twin)")
        for n in json.loads(s.get("corruptions_unfired", "[]")):
            say(f"note: corruption {n['flip']} did not fire: {n['why']}")
        missed = json.loads(s.get("kills_unfired", "[]"))
        if missed:
            shown = "; ".join(f"{m['kill']} ({m['why']})" for m in missed[:5])
            more = (f"; and {len(missed) - 5} more (kills_unfired in the result file)" if len(missed) > 5
                    else "")
            say(f"note: {len(missed)} of {s['kills_planned']} planned kill(s) did not fire: {shown}{more}")
        if s.get("summary_merge_problems"):
            say(f"warning: strategy {self.ctx.cfg.strategy.name}: {s['summary_merge_problems']}")
        for line in self.writer.warnings:  # failed checkpoints, attributes stored as text
            say(f"warning: {line}")
        sys.stdout.flush()
