"""The seed papers' clusters and workloads, for ``mpiec simulate --paper NAME``: one preset per paper
of the registry ``mpiec.reproduce.papers.PAPERS`` (which names them; ``preset(key)``).

Owns what each paper's setup is as far as the paper and its code state it (tags: [P] the
paper's abstract or proceedings, [C] the authors' code, [S] secondary summaries, [U] assumed here),
which simulator inputs stand for it, and how its headline is set beside the simulated figure. A
``Paper`` is data: the config overrides of its model, the simulator flags of its cluster and failures,
the strategy variants it compares (a variant is a strategy with its own flags, e.g. Ckpt-30 =
``ckpt`` every 1800 s), and ``verdicts`` that turn the simulated rows into lines "paper: X;
simulated: Y (interval)". Every input is listed as calibrated here or assumed, with its tag.

Invariants: a preset never hides an input: ``inputs()`` lists every flag and override it sets;
figures the papers did not publish are marked [U] and named in the printed "assumed" line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from mpiec.reproduce.papers import CNR, CPR, ECREC, PAPERS

from .failures import HOUR_S, Arrival
from .job import Job

__all__ = ["CNR_PRESET", "CPR_PRESET", "ECREC_PRESET", "Burst", "Paper", "Variant", "preset"]


@dataclass(frozen=True)
class Burst:
    """Failures at given times, each taking ``size`` distinct nodes drawn (with the seed) among the
    first ``among`` (the server nodes of a dedicated layout): CPR's injected failures of four
    embedding servers at once, ECRec's one parameter server."""

    times_s: tuple[float, ...]
    size: int
    among: int

    def arrivals(self, nodes: int, seed: int) -> Iterator[Arrival]:
        rng = np.random.default_rng(seed)
        pool = min(self.among, nodes)
        for t in sorted(self.times_s):
            picked = sorted(int(x) for x in rng.choice(pool, size=min(self.size, pool), replace=False))
            yield Arrival(t, picked[0], tuple(picked[1:]))

    def job_mtbf_s(self, nodes: int) -> float:
        ts = sorted(self.times_s)
        return (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else (ts[0] if ts else math.inf)

    def arrival_bound(self, nodes: int) -> float:
        return len(self.times_s)

    def start_events(self, nodes: int) -> int:
        return 0

    def servers_per_failure(self, job: Job) -> float:
        return float(min(self.size, self.among))

    def describe(self) -> str:
        hours = ", ".join(f"{t / HOUR_S:g}" for t in self.times_s)
        return f"{len(self.times_s)} failure(s) at {hours} h, {self.size} server node(s) each"


@dataclass(frozen=True)
class Variant:
    """One column of a paper's comparison: ``strategy`` with its own simulator settings."""

    label: str
    strategy: str
    interval_s: float | None = None  # a fixed checkpoint interval (Ckpt-30)
    k: int | None = None  # ecrm's data rows per stripe


#: a verdict: (what, the paper's figure as text, the simulated figure, its interval half-width, unit)
Verdict = tuple[str, str, float, float, str]


@dataclass(frozen=True)
class Paper:
    key: str
    title: str
    headline: str
    preset: str
    sets: tuple[str, ...]  # config overrides: the paper's model
    servers: int
    trainers: int
    hours: float  # failure-free length of the simulated job
    failures: Burst | None  # None: failure-free runs only (bytes, overheads)
    variants: tuple[Variant, ...]
    flags: dict[str, float | int | str] = field(default_factory=dict)  # simulator inputs (cluster)
    calibrated: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    verdicts: Callable[[dict[str, dict[str, float]]], list[Verdict]] | None = None

    def inputs(self) -> list[str]:
        """Every input the preset sets, as ``name = value`` (printed under the table)."""
        out = [f"--set {s}" for s in self.sets]
        out += [f"{self.servers} server nodes, {self.trainers} trainer nodes, {self.hours:g} h"]
        out += [f"--{k.replace('_', '-')} {v}" for k, v in self.flags.items()]
        if self.failures is not None:
            out.append(self.failures.describe())
        return out


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


def _ecrec(r: dict[str, dict[str, float]]) -> list[Verdict]:
    out: list[Verdict] = []
    for ck in ("Ckpt-30", "Ckpt-60"):
        for ec in ("ECRM-k2", "ECRM-k4"):
            a, b = r[ec]["overhead"], r[ck]["overhead"]
            red = 1.0 - _ratio(a, b) if b > 0 else math.nan
            out.append((f"overhead of {ec} below {ck} ({100 * a:.2g} % vs {100 * b:.2g} %)",
                        "up to 66 % lower (PVLDB), 88 % (arXiv) [P]", 100 * red, math.nan, "% lower"))
    for ec in ("ECRM-k2", "ECRM-k4"):
        ratio = _ratio(r["Ckpt-30"]["recovery_s"], r[ec]["recovery_s"])
        ck_s, ec_s = r["Ckpt-30"]["recovery_s"], r[ec]["recovery_s"]
        out.append((f"recovery (kill -> state back in full: restore / rebuild; {ck_s:.3g} s vs "
                    f"{ec_s:.3g} s), Ckpt-30 over {ec}", "up to 9.8x faster (PVLDB) [P]", ratio, math.nan,
                    "x"))
        ratio = _ratio(r["Ckpt-30"]["time_lost_per_failure_s"], r[ec]["time_lost_per_failure_s"])
        out.append((f"time lost per failure (re-executed work included), Ckpt-30 over {ec}",
                    "— (not a headline)", ratio, math.nan, "x"))
        out.append((f"{ec} throughput while rebuilding, drop vs normal", "7-13 % drop [P]",
                    100 * r[ec]["rebuild_drop"], math.nan, "%"))
    return out


def _cpr(r: dict[str, dict[str, float]]) -> list[Verdict]:
    out: list[Verdict] = []
    full = r["full recovery"]
    out.append(("full recovery: checkpoint-related overhead (1 - ETTR)", "8.2-8.5 % [P]",
                100 * (1 - full["ettr"]), 100 * full["ettr_ci"], "%"))
    for v in ("CPR", "CPR-MFU", "CPR-SSU"):
        out.append((f"{v}: checkpoint-related overhead (1 - ETTR)",
                    "0.53-0.68 % (MFU, SSU) [P]" if v != "CPR" else "— (not a headline)",
                    100 * (1 - r[v]["ettr"]), 100 * r[v]["ettr_ci"], "%"))
        out.append((f"{v}: portion of lost samples", "model quality on par with full recovery [P]",
                    100 * r[v]["pls"], math.nan, "%"))
    return out


def _cnr(r: dict[str, dict[str, float]]) -> list[Verdict]:
    full, cnr = r["full checkpoint"], r["Check-N-Run"]
    return [
        ("write bandwidth, full checkpoints over Check-N-Run", "6-17x lower [P]",
         _ratio(full["write_bytes"], cnr["write_bytes"]), math.nan, "x"),
        ("storage capacity, full checkpoint over Check-N-Run's chain", "2.5-8x lower [P]",
         _ratio(full["capacity_bytes"], cnr["capacity_bytes"]), math.nan, "x"),
        ("rows changed per 30-minute interval", "~26 % [S]", 100 * cnr["changed_fraction"], math.nan, "%"),
    ]


def _even(cards: int, total: int) -> str:
    base = [total // cards] * cards
    for i in range(total - sum(base)):
        base[i] += 1
    return "[" + ", ".join(str(x) for x in base) + "]"


#: ECRec's setup, the one ``mpiec reproduce ecrec`` reads too (``mpiec.reproduce.papers``): its table of
#: 197,767,405 rows [C] as 26 tables of one lookup each, and the storage, network and worker figures
#: assumed for it [U]
_E = ECREC
_E_STORE_GBPS = _E.storage.nominal / 1e3  # a server's checkpoint stream, GB/s

ECREC_PRESET = Paper(
    key="ecrec",
    title="ECRec (Zhang, Liu, Kosaian, Yang, Rashmi, PVLDB 2023; ECRM, arXiv 2104.01981)",
    headline="erasure-coded tables: overhead up to 66 % lower than checkpointing (88 % in the arXiv "
             "version), recovery up to 9.8x (10.3x) faster, 7-13 % throughput drop while recovering",
    preset="mlperf-dlrmv2",
    sets=(f"data.cardinalities={_even(_E.features, _E.rows)}", "data.multi_hot=[]",
          f"model.dim={_E.dim}", f"model.bottom={[*_E.bottom, _E.dim]}", f"model.top={list(_E.top)}",
          f"training.batch_size={_E.batch}", "training.optimizer='sgd'"),
    servers=_E.servers, trainers=_E.workers, hours=(_E.kill_at_s + _E.after_s) / HOUR_S,
    failures=Burst((_E.kill_at_s,), 1, _E.servers),
    variants=(Variant("no FT", "none"), Variant("Ckpt-30", "ckpt", interval_s=_E.ckpt30_s),
              Variant("Ckpt-60", "ckpt", interval_s=_E.ckpt60_s), Variant("ECRM-k2", "ecrm", k=2),
              Variant("ECRM-k4", "ecrm", k=4)),
    flags={"trainer_speedup": _E.trainer_speedup, "server_threads": _E.server_threads,
           "network_gbps": _E.network_gbps, "storage_profile": "pfs-node",
           "node_storage_gbps": _E_STORE_GBPS, "storage_gbps": _E.servers * _E_STORE_GBPS,
           "storage_latency_ms": 1.0, "scaling": "weak"},
    calibrated=("CPU per sample of a trainer and per row of a server (scaled by model size)",
                "ecrm's parity CPU per byte and rows updated per lookup", "recovery latencies",
                "rebuild CPU per byte"),
    assumed=("[C] 5 parameter servers, 15 V100 workers, batch 2048 per worker, one 197.8 M x 128 table, "
             "SGD",
             "[C] one server killed 15 min in, 60 min more; Ckpt-30 / Ckpt-60",
             f"[U] a V100 worker = {_E.trainer_speedup:g} calibration cores on the MLPs; a server's row "
             f"work over {_E.server_threads} of its 96 cores; {_E.network_gbps:g} Gbit/s to a worker",
             f"[U] {_E.storage.text()}: the same assumption as mpiec reproduce ecrec "
             "(mpiec.reproduce.papers; the authors' scripts write to local EBS [C], its bandwidth is not "
             "published)",
             "[U] 26 ids per sample over 26 tables, the ids' power law of the suite's data (zipf 1.05)"),
    verdicts=_ecrec)

CPR_PRESET = Paper(
    key="cpr",
    title="CPR (Maeng et al., MLSys 2021, arXiv 2011.02999)",
    headline="partial recovery: CPR-MFU and CPR-SSU cut checkpoint-related overhead from 8.2-8.5 % "
             "(full recovery) to 0.53-0.68 %, model quality on par",
    preset="mlperf-dlrmv2",
    sets=("training.batch_size=1638",),
    servers=CPR.servers, trainers=CPR.trainers, hours=CPR.run_h,
    failures=Burst(CPR.failure_times_s(), CPR.per_failure, CPR.servers),
    variants=(Variant("full recovery", "ckpt"), Variant("CPR", "cpr"), Variant("CPR-MFU", "cpr-mfu"),
              Variant("CPR-SSU", "cpr-ssu")),
    flags={"trainer_speedup": 1.0, "server_threads": 20, "network_gbps": 25.0,
           "storage_profile": "pfs-node", "replacement": "reschedule", "scaling": "weak"},
    calibrated=("CPU per step by role", "checkpoint part sizes; cpr-mfu/ssu's share of lost updates "
                "against cpr", "recovery latencies"),
    assumed=("[S] 20 trainers, 18 embedding servers (20-core CPUs, 25 Gbit Ethernet), a 50-hour run with "
             "5 failures of 4 random embedding servers each (times spread evenly: [U])",
             "[U] the model: MLPerf DLRMv2's shape (Criteo Terabyte, as the MLSys version), global batch "
             "~32 k; checkpoints to a parallel file system (pfs-node); no spare: rescheduled",
             f"[U] {CPR.pls_target.text()}: the suite's default (strategy.target_pls), the same "
             "assumption as mpiec reproduce cpr (mpiec.reproduce.papers)"),
    verdicts=_cpr)

CNR_PRESET = Paper(
    key="cnr",
    title="Check-N-Run (Eisenman et al., NSDI 2022, arXiv 2010.08679)",
    headline="differential + quantized checkpoints: write bandwidth 6-17x and storage capacity 2.5-8x "
             "lower on production models of terabytes",
    preset="mlperf-dlrmv2",
    sets=(),
    servers=16, trainers=16, hours=24.0,
    failures=None,
    variants=(Variant("full checkpoint", "ckpt", interval_s=CNR.interval_s),
              Variant("Check-N-Run", "cnr", interval_s=CNR.interval_s)),
    flags={"interval_s": CNR.interval_s, "storage_profile": CNR.storage_profile, "cnr_diff": CNR.diff,
           "cnr_bits": CNR.bits, "scaling": "weak", "server_threads": 8},
    calibrated=("rows updated per lookup (from measured cnr diffs, else ecrm's parity rows)",
                "CPU per step by role"),
    assumed=("[S] a 30-minute interval, intermittent diffs, bits by the expected restores",
             "[U] the model: MLPerf DLRMv2's shape on 16 + 16 nodes (the paper's models are larger, "
             "terabytes [P]); remote object storage",
             "[U] the ids' power law of the suite's data (zipf 1.05): it sets the rows changed per "
             "interval"),
    verdicts=_cnr)


def preset(key: str) -> Paper:
    """The preset of paper ``key`` (a key of ``mpiec.reproduce.papers.PAPERS``, the one registry of papers,
    which names the preset of each)."""
    return PAPERS[key].preset()
