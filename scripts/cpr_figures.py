"""CPR's qualitative findings on mpiec's own model (issue 8, item 4), and the bench table of the note.

Three sections of ``docs/notes/cpr-figures.md``, each made of real ``mpiec run`` launches (mpiexec
underneath) or read from result files:

1. **Final AUC loss grows with PLS.** ``cpr`` runs under one fixed server-kill plan (by default
   server 0 at 45 % and server 1 at 90 % of the steps), one per ``strategy.target_pls`` (the
   interval follows from the target and the plan's MTBF), for each seed; ΔAUC = the run's final
   AUC minus the failure-free ``none`` run's with the same seed (training is deterministic, so the
   two runs differ only by what the failures lost). Reported against the *measured* PLS.
2. **MFU and SSU lose less than plain partial recovery at the same checkpoint bytes.** Under the
   same kill plan: plain ``cpr`` with a full checkpoint every ``T`` steps, against ``cpr-mfu`` and
   ``cpr-ssu`` with full checkpoints every ``2T`` steps and partial checkpoints in between, sized
   (``--mfu-every``, ``--ssu-every``) to write about the same bytes; plain ``cpr`` at ``2T`` shows
   what the partials bring back. Bytes written are measured and printed beside ΔAUC.
3. **The bench line** (``--bench DIR``): the result files of one ``mpiec bench`` (every strategy
   failure-free and under one failure scenario) turned into the note's table: failure-free
   overhead, checkpoint stall, bytes written relative to ``ckpt``, capacity, lost samples, ΔAUC,
   the interval each strategy used, and 1 − ETTR (the protection-related overhead under failures).

Sections not selected with ``--sections`` are kept from the existing page, and so is section 4
(the hand-written reading of the figures). Runs are cached in
``--work`` (a run whose directory already holds a result file is not run again), so a page can be
remade without training again. Figures ``docs/notes/figures/cpr-*.png`` when matplotlib is installed.

    python scripts/cpr_figures.py [--preset laptop] [--steps 400] [--seeds 1,2]
                                  [--targets 0.01,0.03,0.1,0.3,1] [--interval 50]
                                  [--sections pls,bytes,bench] [--bench DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cnr_figures import run  # noqa: E402  (the same launcher: mpiec run in a subprocess)
from mpiec.analysis import stats  # noqa: E402

from mpiec.results import RunResult, decode, read_result  # noqa: E402


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's ρ (ties averaged) from the suite's statistics module; a description per seed here."""
    return stats.spearman(xs, ys).value


#: The page's sections by their heading prefix; "notes" (hand-written reading of the figures) is
#: never made by the script, only kept.
SECTIONS = {"pls": "## 1.", "bytes": "## 2.", "bench": "## 3.", "notes": "## 4."}


# -- running --------------------------------------------------------------------------------------
def cached(args: list[str], out: Path) -> RunResult:
    """``run`` unless ``out`` already holds a result file (``--work`` reused)."""
    done = sorted(out.glob("*.h5")) if out.is_dir() else []
    if done:
        print(f"  (cached) mpiec run {' '.join(args)}", flush=True)
        return read_result(done[0])
    return run(args, out)


def kill_plan(steps: int, fractions: list[float]) -> list[str]:
    """Server ``i`` killed at ``fractions[i]`` of the steps (server 0, 1, 0, ... with two servers)."""
    return [f"server:{i % 2}@step={max(1, int(steps * f))}" for i, f in enumerate(fractions)]


class Runner:
    """The runs of sections 1 and 2: common arguments, the failure-free references per seed."""

    def __init__(self, preset: str, steps: int, kills: list[str], work: Path) -> None:
        self.preset, self.steps, self.kills, self.work = preset, steps, kills, work
        self.refs: dict[int, RunResult] = {}

    def base(self, seed: int) -> list[str]:
        return ["--preset", self.preset, "--steps", str(self.steps), "--set", f"training.seed={seed}"]

    def reference(self, seed: int) -> RunResult:
        if seed not in self.refs:
            self.refs[seed] = cached([*self.base(seed), "--strategy", "none"], self.work / f"none-s{seed}")
        return self.refs[seed]

    def cpr(self, name: str, seed: int, sets: dict[str, object], tag: str) -> dict:
        args = [*self.base(seed), "--strategy", name, "--set", f"layout.spares={len(self.kills)}"]
        for key, value in sets.items():
            args += ["--set", f"strategy.{key}={value}"]
        for k in self.kills:
            args += ["--kill", k]
        res = cached(args, self.work / f"{tag}-s{seed}")
        return figures(res, self.reference(seed), name, seed)


def figures(res: RunResult, ref: RunResult, name: str, seed: int) -> dict:
    """One cpr run's row: its interval, what it lost, what it wrote, its AUC beside the reference's."""
    s, ck = res.summary, res.checkpoints
    kinds = [decode(k) for k in ck["kind"]]
    full = np.array([k == "full" for k in kinds], dtype=bool)
    return {
        "strategy": name, "seed": seed,
        "interval": int(s["checkpoint_interval_steps"]), "rule": s["checkpoint_interval_rule"],
        "target": float(s["pls_target"]), "pls": float(s["pls"]), "pls_predicted": float(s["pls_predicted"]),
        "lost_updates": int(s["lost_updates"]), "fulls": int(full.sum()), "partials": int((~full).sum()),
        "bytes": int(s["checkpoint_bytes"]), "partial_rows": int(ck["rows"][~full].sum()),
        "stall_s": float(np.nansum(ck["stall_s"])),
        "auc": float(s["final_auc"]), "d_auc": float(s["final_auc"] - ref.summary["final_auc"]),
        "d_logloss": float(s["final_logloss"] - ref.summary["final_logloss"]),
        "ref_auc": float(ref.summary["final_auc"]), "steps": int(s["steps_completed"]),
        "wall_s": wall(res), "ref_wall_s": wall(ref),
    }


def wall(res: RunResult) -> float:
    """Training time of a run (its last step's end), s."""
    return float(res.timeline["t_end"][-1]) if len(res.timeline) else 0.0


def effort(rows: list[dict]) -> str:
    """How many runs a section took and their training time (from the result files, so a page
    remade from cached runs still says what the runs cost)."""
    refs = {r["seed"]: r["ref_wall_s"] for r in rows}
    total = sum(r["wall_s"] for r in rows) + sum(refs.values())
    return (f"{len(rows)} runs and {len(refs)} failure-free references, {total / 60:.0f} min of training "
            f"time summed over the runs, on {os.cpu_count()} cores ({platform.machine()}) shared with "
            "other jobs")


# -- section 1: AUC loss against PLS --------------------------------------------------------------
def pls_sweep(r: Runner, seeds: list[int], targets: list[float]) -> list[dict]:
    rows = []
    for seed in seeds:
        for t in targets:
            rows.append(r.cpr("cpr", seed, {"target_pls": t}, f"cpr-pls{t:g}"))
    return rows


def pls_section(a, rows: list[dict], seeds: list[int], fig: str) -> list[str]:
    targets = sorted({r["target"] for r in rows})
    lines = [
        SECTIONS["pls"] + " Final AUC loss against the portion of lost samples (PLS)",
        "",
        f"Made by `python scripts/cpr_figures.py --sections pls --preset {a.preset} --steps {a.steps} "
        f"--seeds {a.seeds} --targets {a.targets} --kills {a.kills}`: {effort(rows)}.",
        "",
        f"`cpr` on the `{a.preset}` preset cut to {a.steps} steps, kill plan `{'; '.join(kill_plan_of(a))}` "
        "(the same for every run), one run per `strategy.target_pls` and seed; the interval follows "
        "from the target and the plan's MTBF (`checkpoint_interval_rule = pls`: "
        "`T = 2 · N_shards · MTBF · target`; a target of 1 gives an interval longer than the run: "
        "no checkpoint, a failed shard restarts from its initial rows). ΔAUC = final AUC − the "
        "failure-free `none` run's of the same seed (bit-for-bit the same training until the first "
        "kill). PLS measured = samples whose embedding updates were lost / samples trained.",
        "",
        "| target PLS | interval (steps) | seed | PLS measured | PLS predicted | lost updates "
        "| full checkpoints | ΔAUC | Δlogloss |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in targets:
        for r in sorted((x for x in rows if x["target"] == t), key=lambda x: x["seed"]):
            lines.append(f"| {t:g} | {r['interval']} | {r['seed']} | {r['pls']:.4f} "
                         f"| {r['pls_predicted']:.4f} | {r['lost_updates']:,} | {r['fulls']} "
                         f"| {r['d_auc']:+.5f} | {r['d_logloss']:+.5f} |")
    lines += ["", "Per seed, rank correlation (Spearman) of measured PLS with the AUC loss (−ΔAUC), and the "
              "failure-free AUC:", ""]
    for seed in seeds:
        sel = [x for x in rows if x["seed"] == seed]
        rho = spearman([x["pls"] for x in sel], [-x["d_auc"] for x in sel])
        ref = sel[0]["ref_auc"] if sel else math.nan
        lines.append(f"* seed {seed}: ρ = {rho:+.2f} over {len(sel)} targets (failure-free AUC {ref:.4f})")
    lines += ["", verdict_pls(rows, seeds), ""]
    if fig:
        lines += [f"![AUC loss against PLS]({fig})", ""]
    return lines


def kill_plan_of(a) -> list[str]:
    return kill_plan(a.steps, [float(f) for f in a.kills.split(",")])


def verdict_pls(rows: list[dict], seeds: list[int]) -> str:
    """What the table says about 'AUC loss grows with PLS', with the seed-to-seed spread."""
    by_t: dict[float, list[dict]] = {}
    for r in rows:
        by_t.setdefault(r["target"], []).append(r)
    means = sorted((float(np.mean([x["pls"] for x in v])), float(np.mean([-x["d_auc"] for x in v])),
                    float(np.ptp([-x["d_auc"] for x in v])) if len(v) > 1 else 0.0) for v in by_t.values())
    rhos = [spearman([x["pls"] for x in rows if x["seed"] == s],
                           [-x["d_auc"] for x in rows if x["seed"] == s]) for s in seeds]
    spread = max(m[2] for m in means) if means else math.nan
    lo, hi = means[0], means[-1]
    return (f"Mean over seeds: AUC loss {lo[1]:+.5f} at PLS {lo[0]:.3f} and {hi[1]:+.5f} at PLS {hi[0]:.3f}; "
            f"the largest seed-to-seed spread of the AUC loss at one target is {spread:.5f}. "
            + ("The loss grows with PLS in every seed (ρ = 1)." if all(r == 1.0 for r in rhos) else
               f"Rank correlations per seed: {', '.join(f'{r:+.2f}' for r in rhos)} "
               "(1 = the loss grows with PLS at every step of the sweep)."))


# -- section 2: MFU / SSU against plain cpr at the same bytes ---------------------------------------
def bytes_sweep(r: Runner, seeds: list[int], interval: int, a) -> list[dict]:
    rows = []
    long = 2 * interval
    for seed in seeds:
        rows.append(r.cpr("cpr", seed, {"interval": interval}, f"cpr-i{interval}"))
        rows.append(r.cpr("cpr", seed, {"interval": long}, f"cpr-i{long}"))
        rows.append(r.cpr("cpr-mfu", seed, {"interval": long, "mfu_every": a.mfu_every,
                                            "mfu_fraction": a.mfu_fraction}, f"mfu-i{long}-e{a.mfu_every}"))
        rows.append(r.cpr("cpr-ssu", seed, {"interval": long, "ssu_every": a.ssu_every,
                                            "ssu_rate": a.ssu_rate}, f"ssu-i{long}-e{a.ssu_every}"))
    return rows


def bytes_section(a, rows: list[dict], seeds: list[int], fig: str) -> list[str]:
    interval = a.interval
    lines = [
        SECTIONS["bytes"] + " MFU and SSU against plain partial recovery at the same checkpoint bytes",
        "",
        f"Made by `python scripts/cpr_figures.py --sections bytes --preset {a.preset} --steps {a.steps} "
        f"--seeds {a.seeds} --kills {a.kills} --interval {interval} --mfu-every {a.mfu_every} "
        f"--mfu-fraction {a.mfu_fraction} --ssu-every {a.ssu_every} --ssu-rate {a.ssu_rate}`: "
        f"{effort(rows)}.",
        "",
        f"The same kill plan. Plain `cpr` with a full checkpoint every {interval} steps against "
        f"`cpr-mfu` (the {a.mfu_fraction:g} most pulled rows every {a.mfu_every} steps) and `cpr-ssu` "
        f"(the rows pulled in a {a.ssu_rate:g} sub-sample of the steps, every {a.ssu_every} steps), "
        f"both with full checkpoints every {2 * interval} steps, so that the partials spend about "
        f"the bytes the halved full checkpoints save; plain `cpr` every {2 * interval} steps shows "
        "what the partials bring back. Bytes = everything written (full and partial checkpoints), "
        f"relative to plain `cpr` every {interval} steps of the same seed.",
        "",
        "| strategy | full every | partials (rows) | seed | bytes written | relative bytes | lost updates "
        "| PLS | ΔAUC | Δlogloss |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    plain = {r["seed"]: r for r in rows if r["strategy"] == "cpr" and r["interval"] == interval}
    order = [("cpr", interval)] + [(name, 2 * interval) for name in ("cpr", "cpr-mfu", "cpr-ssu")]
    for name, iv in order:
        for r in sorted((x for x in rows if x["strategy"] == name and x["interval"] == iv),
                        key=lambda x: x["seed"]):
            rel = r["bytes"] / plain[r["seed"]]["bytes"] if r["seed"] in plain else math.nan
            parts = f"{r['partials']} ({r['partial_rows']:,})" if r["partials"] else "—"
            lines.append(f"| `{name}` | {iv} | {parts} | {r['seed']} | {r['bytes'] / 1e6:.0f} MB "
                         f"| {rel:.2f} | {r['lost_updates']:,} | {r['pls']:.4f} | {r['d_auc']:+.5f} "
                         f"| {r['d_logloss']:+.5f} |")
    lines += ["", "Mean over seeds (spread = max − min over seeds):", "",
              "| strategy | full every | relative bytes | lost updates | AUC loss (−ΔAUC) | spread |",
              "|---|---|---|---|---|---|"]
    summary = {}
    for name, iv in order:
        sel = [x for x in rows if x["strategy"] == name and x["interval"] == iv]
        if not sel:
            continue
        rel = [x["bytes"] / plain[x["seed"]]["bytes"] for x in sel if x["seed"] in plain]
        loss = [-x["d_auc"] for x in sel]
        summary[(name, iv)] = (float(np.mean(loss)), float(np.ptp(loss)), loss)
        lost = np.mean([x["lost_updates"] for x in sel])
        lines.append(f"| `{name}` | {iv} | {np.mean(rel):.2f} | {lost:,.0f} | {np.mean(loss):+.5f} "
                     f"| {np.ptp(loss):.5f} |")
    lines += ["", verdict_bytes(summary, interval, seeds), ""]
    if fig:
        lines += [f"![MFU and SSU at the same bytes]({fig})", ""]
    return lines


def verdict_bytes(summary: dict, interval: int, seeds: list[int]) -> str:
    base = summary.get(("cpr", interval))
    if base is None:
        return ""
    out = []
    for name in ("cpr-mfu", "cpr-ssu"):
        v = summary.get((name, 2 * interval))
        if v is None:
            continue
        wins = sum(1 for b, x in zip(base[2], v[2], strict=True) if x < b)
        out.append(f"`{name}` loses {'less' if v[0] < base[0] else 'more'} AUC than plain `cpr` on average "
                   f"({v[0]:+.5f} vs {base[0]:+.5f}), less in {wins} of {len(seeds)} seeds")
    return "; ".join(out) + "."


# -- section 3: the bench line ---------------------------------------------------------------------
def bench_rows(bench: Path) -> list[dict]:
    """One row per strategy variant from ``mpiec bench``'s result files: its failure-free run and its
    failure run paired by variant."""
    results = [read_result(p) for p in sorted(bench.glob("*.h5"))]
    ff = {str(r.attrs.get("variant") or r.strategy): r for r in results if not r.config["failures"]["kill"]}
    fail = {str(r.attrs.get("variant") or r.strategy): r for r in results if r.config["failures"]["kill"]}
    none = ff.get("none")
    ckpt = ff.get("ckpt")
    rows = []
    for variant, f in ff.items():
        s = f.summary
        x = fail.get(variant)
        fx = x.summary if x is not None else {}
        rows.append({
            "variant": variant, "strategy": f.strategy,
            "overhead": 1 - s["throughput_sps"] / none.summary["throughput_sps"] if none else math.nan,
            "interval": s.get("checkpoint_interval_steps", -1), "rule": s.get("checkpoint_interval_rule", ""),
            "checkpoints": s.get("checkpoints", 0), "stall_s": s.get("checkpoint_critical_s", 0.0),
            "wall_s": float(f.timeline["t_end"][-1]) if len(f.timeline) else math.nan,
            "bytes": s["checkpoint_bytes"],
            "rel_bytes": s["checkpoint_bytes"] / ckpt.summary["checkpoint_bytes"] if ckpt else math.nan,
            "rel_per_ckpt": (s["checkpoint_bytes"] / s["checkpoints"]) / (ckpt.summary["checkpoint_bytes"]
                                                                          / ckpt.summary["checkpoints"])
            if ckpt and s.get("checkpoints") else math.nan,
            "capacity": capacity(f), "write_reduction": s.get("write_reduction", math.nan),
            "capacity_reduction": s.get("capacity_reduction", math.nan),
            "lost_samples": fx.get("lost_samples", math.nan), "lost": fx.get("lost", None),
            "d_auc": fx.get("final_auc", math.nan) - s["final_auc"],
            "lossless": bool(fx) and fx.get("param_checksum") == s["param_checksum"],
            "ettr": fx.get("ettr", math.nan), "time_lost_s": fx.get("time_lost_s", math.nan),
            "recoveries": fx.get("recoveries", 0), "fail_stall_s": fx.get("checkpoint_critical_s", 0.0),
            "fail_interval": fx.get("checkpoint_interval_steps", -1),
        })
    order = ["none", "ckpt", "cpr", "cpr-mfu", "cpr-ssu", "cnr"]
    return sorted(rows, key=lambda r: (order.index(r["strategy"]) if r["strategy"] in order else len(order),
                                       r["variant"]))


def capacity(res: RunResult) -> float:
    """Bytes that must be kept to restore (the most, over the run): ``cnr`` measures it; ``ckpt`` /
    ``cpr``: the newest full checkpoint; ``cpr-mfu`` / ``-ssu``: it plus the partials written after it."""
    s = res.summary
    if "capacity_bytes" in s:
        return float(s["capacity_bytes"])
    ck = res.checkpoints
    if not len(ck):
        return 0.0
    best, since = 0.0, 0.0
    for kind, nbytes in zip(ck["kind"], ck["bytes"], strict=True):
        if decode(kind) == "full":
            since = float(nbytes)
        else:
            since += float(nbytes)
        best = max(best, since)
    return best


def bench_section(a, rows: list[dict]) -> list[str]:
    bench = Path(a.bench)
    kills = ""
    for p in sorted(bench.glob("*.h5")):
        r = read_result(p)
        if r.config["failures"]["kill"]:
            kills = "; ".join(r.config["failures"]["kill"])
            break
    preset = next((read_result(p).attrs.get("preset", "") for p in sorted(bench.glob("*.h5"))), "")
    lines = [
        SECTIONS["bench"] + " The bench line: every strategy failure-free and under the same random failures",
        "",
        f"From the result files of one `mpiec bench` (`{bench.name}`, preset `{preset}`), rendered by "
        f"`python scripts/cpr_figures.py --sections bench --bench DIR`. Kill plan (drawn once, "
        f"the same for every strategy): `{kills or 'none'}`.",
        "",
        *([f"The bench: `{a.bench_command}`", ""] if a.bench_command else []),
        "Columns: **overhead** = throughput lost vs the failure-free `none` run; **stall** = "
        "`checkpoint_critical_s` of the failure-free run (seconds the training thread spent on "
        "checkpoints) and its share of that run's wall time; **bytes vs ckpt** = bytes written by "
        "the failure-free run / `ckpt`'s, in total and per checkpoint (the intervals differ); "
        "**capacity** = bytes that must be kept to restore (`cnr`: "
        "measured; `ckpt`, `cpr`: one full checkpoint; MFU / SSU: a full one plus the partials after "
        "it); **lost samples**, **ΔAUC** (final AUC of the failure run − its failure-free twin's), "
        "**1 − ETTR** (unproductive time under failures: recovery, re-execution, checkpoint stall, over "
        "the wall time) from the failure run; the interval each strategy used (failure-free / failure "
        "run, in steps) and its rule.",
        "",
        "| strategy | interval (rule) | checkpoints | overhead | stall s (share) | bytes | bytes vs ckpt "
        "(per checkpoint) | capacity | lost samples | ΔAUC | lossless | 1 − ETTR | time lost s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        iv = (f"{r['interval']} / {r['fail_interval']} ({r['rule']})" if r["rule"] else "—")
        share = r["stall_s"] / r["wall_s"] if r["wall_s"] and r["wall_s"] > 0 else math.nan
        lines.append(
            f"| `{r['variant']}` | {iv} | {r['checkpoints'] or '—'} | {pct(r['overhead'])} "
            f"| {r['stall_s']:.2f} ({pct(share)}) | {mb(r['bytes'])} | {num(r['rel_bytes'], '.2f')} "
            f"({num(r['rel_per_ckpt'], '.2f')}) "
            f"| {mb(r['capacity'])} | {r['lost_samples'] if r['lost'] is not None else '—'}"
            f"{' (run lost)' if r['lost'] else ''} | {num(r['d_auc'], '+.5f')} "
            f"| {'yes' if r['lossless'] else 'no'} | {pct(1 - r['ettr'])} | {num(r['time_lost_s'], '.1f')} |")
    cnr = next((r for r in rows if r["strategy"] == "cnr"), None)
    if cnr is not None:
        lines += ["", f"`{cnr['variant']}` against its own full fp32 checkpoints: write reduction "
                  f"{num(cnr['write_reduction'], '.2f')}x, capacity reduction "
                  f"{num(cnr['capacity_reduction'], '.2f')}x (Check-N-Run: 6–17x and 2.5–8x)."]
    lines.append("")
    return lines


def pct(x: float) -> str:
    return f"{100 * x:+.1f} %" if isinstance(x, float) and math.isfinite(x) else "—"


def num(x: float, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def mb(x: float) -> str:
    return f"{x / 1e6:.0f} MB" if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else "0"


# -- plots and the page ------------------------------------------------------------------------------
def plots(pls_rows: list[dict], bytes_rows: list[dict], interval: int, figdir: Path) -> dict[str, str]:
    """The figures of sections 1 and 2 (``{"pls": path, "bytes": path}``, relative to docs/)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  matplotlib not installed: tables only")
        return {}
    figdir.mkdir(parents=True, exist_ok=True)

    def save(fig, ax, name: str, xlabel: str, title: str) -> str:
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("final AUC loss vs failure-free")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(figdir / name, dpi=110)
        plt.close(fig)
        return f"figures/{name}"

    out = {}
    if pls_rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for seed in sorted({r["seed"] for r in pls_rows}):
            sel = sorted((r for r in pls_rows if r["seed"] == seed), key=lambda r: r["pls"])
            ax.plot([r["pls"] for r in sel], [-r["d_auc"] for r in sel], marker="o", label=f"seed {seed}")
        out["pls"] = save(fig, ax, "cpr-auc-vs-pls.png", "portion of lost samples (measured)",
                          "cpr: AUC loss against PLS")
    if bytes_rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        plain = {r["seed"]: r["bytes"] for r in bytes_rows
                 if r["strategy"] == "cpr" and r["interval"] == interval}
        marks = {"cpr": "o", "cpr-mfu": "s", "cpr-ssu": "^"}
        for name in ("cpr", "cpr-mfu", "cpr-ssu"):
            sel = [r for r in bytes_rows if r["strategy"] == name]
            ax.scatter([r["bytes"] / plain[r["seed"]] for r in sel], [-r["d_auc"] for r in sel],
                       marker=marks[name], label=name)
        out["bytes"] = save(fig, ax, "cpr-partial-bytes.png",
                            f"bytes written / plain cpr every {interval} steps",
                            "cpr variants: AUC loss against bytes written")
    return out


def kept_sections(path: Path) -> dict[str, list[str]]:
    """The sections of an existing page, by their ``## n.`` prefix (what is not remade is kept)."""
    if not path.exists():
        return {}
    out: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        key = next((k for k, p in SECTIONS.items() if line.startswith(p)), None)
        if key:
            current = key
        elif line.startswith("## "):
            current = None
        if current:
            out.setdefault(current, []).append(line)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="laptop")
    ap.add_argument("--steps", type=int, default=400, help="steps of each run (sections 1 and 2)")
    ap.add_argument("--seeds", default="1,2", help="training seeds (the spread between them is reported)")
    ap.add_argument("--kills", default="0.45,0.9",
                    help="server kills at these fractions of the steps (servers 0, 1, 0, ...)")
    ap.add_argument("--targets", default="0.01,0.03,0.1,0.3,1", help="cpr's target_pls values (section 1)")
    ap.add_argument("--interval", type=int, default=50, help="plain cpr's full interval T (section 2)")
    ap.add_argument("--mfu-every", type=int, default=10)
    ap.add_argument("--mfu-fraction", type=float, default=0.1)
    ap.add_argument("--ssu-every", type=int, default=16)
    ap.add_argument("--ssu-rate", type=float, default=0.1)
    ap.add_argument("--sections", default="pls,bytes", help="sections to (re)make: pls, bytes, bench")
    ap.add_argument("--bench", default="", help="directory of one mpiec bench's result files (section 3)")
    ap.add_argument("--bench-command", default="", help="the mpiec bench command line, quoted on the page")
    ap.add_argument("--docs", default="docs/notes", help="where cpr-figures.md and figures/ go")
    ap.add_argument("--work", default="", help="scratch directory for runs (reused: cached runs)")
    a = ap.parse_args(argv)
    sections = [x for x in a.sections.split(",") if x]
    if "bench" in sections and not a.bench:
        ap.error("--sections bench needs --bench DIR (an mpiec bench output directory)")
    seeds = [int(x) for x in a.seeds.split(",")]
    work = Path(a.work or tempfile.mkdtemp(prefix="cpr-figures-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(a.preset, a.steps, kill_plan_of(a), work)
    docs = Path(a.docs)
    page = docs / "cpr-figures.md"
    kept = kept_sections(page)
    made: dict[str, list[str]] = {}
    pls_rows: list[dict] = []
    bytes_rows: list[dict] = []
    for name in ("pls", "bytes"):
        if name not in sections:
            continue
        print(f"{name}: runs in {work}", flush=True)
        if name == "pls":
            pls_rows = pls_sweep(runner, seeds, [float(x) for x in a.targets.split(",")])
        else:
            bytes_rows = bytes_sweep(runner, seeds, a.interval, a)
    figs = plots(pls_rows, bytes_rows, a.interval, docs / "figures") if pls_rows or bytes_rows else {}
    if pls_rows:
        made["pls"] = pls_section(a, pls_rows, seeds, figs.get("pls", ""))
    if bytes_rows:
        made["bytes"] = bytes_section(a, bytes_rows, seeds, figs.get("bytes", ""))
    if "bench" in sections:
        made["bench"] = bench_section(a, bench_rows(Path(a.bench)))
    lines = [
        "# CPR on mpiec's model: figures, and the bench line of issue 8",
        "",
        "> Dated lab notes: made by `scripts/cpr_figures.py`; each section states how and on what; "
        "not maintained as reference.",
        "",
        "Partial recovery (`cpr`, `cpr-mfu`, `cpr-ssu`; Maeng et al., MLSys'21) reproduced on mpiec's own "
        "synthetic DLRM, by `python scripts/cpr_figures.py` (each section says how it was made; rerun to "
        "refresh). Read with [strategies.md](../strategies.md) (`cpr`, `cnr`) and "
        "[cnr-figures.md](cnr-figures.md).",
        "",
    ]
    for name in SECTIONS:
        body = made.get(name) or kept.get(name)
        if body:
            lines += body if body[-1] == "" else [*body, ""]
    page.write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
