"""A randomized kill matrix over every lossless strategy variant (hardening round 3).

Six kill plans per variant, one of each kind (``KINDS``), drawn from a fixed seed and the
variant's place (``MPIEC_KILL_MATRIX_SEED`` draws others; ``MPIEC_KILL_MATRIX_PLANS=12`` runs
each kind twice, the matrix of round 3): one or two kills of servers and trainers, at a step's
start or some milliseconds into it, including a trainer and a server in the same step and a
second kill while the first server's rows are still being rebuilt (``ecrm`` rebuilds 50 rows a
round here, so a rebuild outlasts the run). Each variant has its own draw, so the variants
together still meet as many steps, offsets and indices as twelve shared plans did, in half the
runs: a run is ~2 s of training in ~30 s of launching ranks and tearing them down on a loaded
2-core machine, so fewer steps would save little and fewer runs save what the matrix costs.
Every run must end in bounded time and either

* complete with the failure-free ``param_checksum`` (lossless), or
* be lost for a reason the plan explains and the docs state (``allowed_loss``): a stripe
  beyond the code's tolerance, or ``ecrm``'s overlapped exchange missing a dead trainer's
  gradients -- with its result file written and exit code 1.

A crash (exit 3), a hang (the timeout) or a lossless claim with another checksum fails.
"""

from __future__ import annotations

import os
import random

import pytest
from run_helpers import mpiec

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(900)]

SEED = int(os.environ.get("MPIEC_KILL_MATRIX_SEED", "20"))
STEPS = 30
PLANS = int(os.environ.get("MPIEC_KILL_MATRIX_PLANS", "6"))  # a multiple of len(KINDS): each kind alike
BASE = ["--preset", "tiny", "--steps", str(STEPS), "--set", "layout.spares=2"]

# (id, servers, arguments, the strategy's tolerance: distinct servers lost in one window, and
# whether a trainer dying in the same recovery as a server, see ``allowed_loss``, may lose the run)
VARIANTS = [
    ("ckpt", 2, ["--strategy", "ckpt", "--set", "strategy.interval=5"], 99, False),
    ("ckpt-async", 2, ["--strategy", "ckpt", "--set", "strategy.interval=5",
                       "--set", "strategy.mode='async'"], 99, False),
    ("cnr", 2, ["--strategy", "cnr", "--set", "strategy.interval=5", "--set", "strategy.quantization='none'"],
     99, False),
    ("log", 2, ["--strategy", "log", "--set", "strategy.interval=5"], 99, False),
    ("ecsnap", 3, ["--strategy", "ecsnap", "--set", "strategy.interval=5"], 1, False),
    ("ecrm-xor", 3, ["--strategy", "ecrm", "--set", "strategy.k=2", "--set", "strategy.rebuild_rows=50"],
     1, True),
    ("ecrm-rs-immediate", 4, ["--strategy", "ecrm", "--set", "strategy.code='rs'", "--set", "strategy.k=2",
                              "--set", "strategy.r=2", "--set", "strategy.exchange='immediate'",
                              "--set", "strategy.rebuild_rows=50"], 2, False),
]

KINDS = ["server", "trainer", "trainer+server", "server,server", "server,trainer", "trainer,server"]


def draw_plans(seed: int, servers: int, n: int = PLANS) -> list[list[tuple[str, int, int, str]]]:
    """``n`` plans of (role, index, step, offset) kills; the kinds of ``KINDS`` in turn (each
    ``n / len(KINDS)`` times)."""
    rng = random.Random(seed)
    plans = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        first = rng.randint(4, 22)
        kills = []
        for j, role in enumerate(kind.replace("+", ",").split(",")):
            step = first if ("+" in kind or j == 0) else first + rng.randint(0, 4)
            index = rng.randrange(servers if role == "server" else 2)
            offset = rng.choice(["", "", "+2ms", "+5ms"])
            kills.append((role, index, step, offset))
        plans.append(kills)
    return plans


def kill_arg(plan: list[tuple[str, int, int, str]]) -> str:
    return ";".join(f"{role}:{index}@step={step}{offset}" for role, index, step, offset in plan)


def allowed_loss(plan: list[tuple[str, int, int, str]], tolerance: int, trainer_gradients: bool) -> list[str]:
    """The documented reasons this plan may lose a run of the variant (empty: it must not)."""
    servers = {index for role, index, _, _ in plan if role == "server"}
    reasons = []
    if len(servers) > tolerance:
        reasons.append("stripe")
    server_steps = [step for role, _, step, _ in plan if role == "server"]
    trainer_steps = [step for role, _, step, _ in plan if role == "trainer"]
    # A trainer computes step s + 1 while the servers still apply step s (the overlapped
    # exchange), so a trainer killed in step s + 1 can die before anyone has noticed a server
    # that died in step s: both land in one recovery, the documented limit (docs/strategies.md,
    # ecrm "Limits"). From step s + 2 on it cannot (step s + 1 needs that server's rows).
    if trainer_gradients and any(t <= s + 1 for t in trainer_steps for s in server_steps):
        reasons.append("does not keep the gradients")
    return reasons


@pytest.fixture(scope="module")
def references(failure_free):
    # one run for every server count (the checksum does not depend on it; tests/runs/conftest.py)
    return {servers: failure_free(*BASE, "--set", f"layout.servers={servers}")["param_checksum"]
            for servers in sorted({v[1] for v in VARIANTS})}


def test_the_plans_cover_every_kind():
    assert PLANS % len(KINDS) == 0, "MPIEC_KILL_MATRIX_PLANS must be a multiple of the kinds"
    for vi, (_, servers, *_) in enumerate(VARIANTS):
        assert {kill_arg(p).count(";") for p in draw_plans(SEED + vi, servers)} == {0, 1}
        kinds = [",".join(r for r, *_ in p) for p in draw_plans(SEED + vi, servers)]
        assert sorted(kinds) == sorted(k.replace("+", ",") for k in KINDS) * (PLANS // len(KINDS))
    plans = draw_plans(SEED, 3)
    assert len(plans) == PLANS
    same_step = [p for p in plans
                 if {r for r, *_ in p} == {"trainer", "server"} and len({s for *_, s, _ in p}) == 1]
    assert same_step, "a trainer and a server in the same step"
    assert any([r for r, *_ in p] == ["server", "server"] for p in plans)


@pytest.mark.parametrize("variant", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_kill_matrix(variant, references, tmp_path):
    name, servers, args, tolerance, trainer_gradients = variant
    seed = SEED + VARIANTS.index(variant)  # each variant its own draw
    failures = []
    for i, plan in enumerate(draw_plans(seed, servers)):
        kills = kill_arg(plan)
        run = mpiec(["run", *BASE, "--set", f"layout.servers={servers}", *args, "--kill", kills,
                     "--timeout", "90"], out=tmp_path / str(i), timeout=150)
        where = f"{name} seed {seed} plan {i} {kills!r}: rc {run.code}"
        if run.code not in (0, 1) or len(run.files) != 1:
            tail = run.stdout[-1500:] + run.stderr[-1500:]
            failures.append(f"{where}, {len(run.files)} result files\n{tail}")
            continue
        s = run.result().summary
        if run.code == 0:
            if s["lost"] or s["param_checksum"] != references[servers]:
                failures.append(f"{where}: completed with checksum {s['param_checksum']}, failure-free "
                                f"{references[servers]}")
            continue
        reason = s.get("abort_reason", "")
        allowed = allowed_loss(plan, tolerance, trainer_gradients)
        if not s["lost"] or not any(a in reason for a in allowed):
            failures.append(f"{where}: lost ({reason!r}); allowed here: {allowed or 'none'}")
    assert not failures, "\n".join(failures)
