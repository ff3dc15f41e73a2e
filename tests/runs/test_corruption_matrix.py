"""A randomized corruption matrix: what each strategy declares it sees of a silent corruption
(``Strategy.corruption_cover``), it sees every time.

One run per variant carries three flips drawn from a fixed seed (``MPIEC_CORRUPTION_MATRIX_SEED``
draws others): a bit of an embedding row (``server:*``: the same row under every placement; a
mantissa bit, so that training stays finite), a bit of a trainer's dense replica, and, for a
strategy that writes checkpoints, a bit of a server's part of the newest checkpoint at rest
followed by that server's death (so that a restore reads it). Every run ends in bounded time with
its result file, every flip fired or said why not, and

* ``rows_within = W``: the row flip detected within W steps (the strategy's declaration, or the
  runtime's shard check, ``failures.shard_check_every = N``: within N - 1); ``rows_repaired``: its
  row repaired;
* ``ecrm``'s parity rows: a flipped one (``of=parity``) detected within W steps as well, and with
  ``rows_repaired`` re-encoded (its checks see parity as they see data);
* the runtime's message checksums (on for every strategy that recovers): a gradient message flipped
  in transit (``of=gradient``, any bit) refused in its step and that step executed again;
* ``parts_refused``: no recovery resumed from the flipped checkpoint, and the restore that read
  the flipped part refused it (``restore_failed`` naming its file);
* a recovered lossless run that refused the part ends with the failure-free checksum only when the
  memory flips could not reach the model (not asserted: the flips persist under most strategies).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random

import pytest
from run_helpers import mpiec, resumed_at

from mpiec.launch.resolve import load_config
from mpiec.strategies import get_strategy_class

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(900)]

SEED = int(os.environ.get("MPIEC_CORRUPTION_MATRIX_SEED", "41"))
STEPS = 40
BASE = ["--preset", "tiny", "--steps", str(STEPS)]

CHECKSUMS = ["--set", "failures.message_checksums=true"]
# (id, arguments incl. the layout); a strategy that recovers runs with the runtime's message
# checksums and gets a gradient flip in transit; ecrm's parity rows get a flip too
VARIANTS = [
    ("none", ["--strategy", "none"]),
    ("ckpt", ["--strategy", "ckpt", "--set", "strategy.interval=10", "--set", "layout.spares=1", *CHECKSUMS]),
    ("cnr", ["--strategy", "cnr", "--set", "strategy.interval=10", "--set", "strategy.quantization='none'",
             "--set", "layout.spares=1", *CHECKSUMS]),
    ("log", ["--strategy", "log", "--set", "strategy.interval=10", "--set", "layout.spares=1", *CHECKSUMS]),
    ("ecsnap", ["--strategy", "ecsnap", "--set", "layout.servers=3", *CHECKSUMS]),
    ("ecrm-xor-verify", ["--strategy", "ecrm", "--set", "layout.servers=3",
                         "--set", "strategy.verify_every=3", *CHECKSUMS]),
    ("none-shard-check", ["--strategy", "none", "--set", "failures.shard_check_every=4"]),
    ("ecrm-rs-scrub", ["--strategy", "ecrm", "--set", "layout.servers=4", "--set", "strategy.code='rs'",
                       "--set", "strategy.k=2", "--set", "strategy.r=2",
                       "--set", "strategy.scrub_stripes=2500", *CHECKSUMS]),
]


def cover(args: list[str]):
    """What the variant claims: its strategy's declaration, and the runtime's shard check's (a row
    found within N - 1 steps, by the scan at the latest; not repaired)."""
    sets = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--set"]
    cfg = load_config("tiny", strategy=args[1], sets=[*sets, f"training.steps={STEPS}"])
    claims = get_strategy_class(args[1])(cfg).corruption_cover()
    every = cfg.failures.shard_check_every
    if every and (claims.rows_within is None or claims.rows_within > every - 1):
        claims = dataclasses.replace(claims, rows_within=every - 1)
    return claims, cfg


def draw(seed: int, servers: int, checkpoints: bool, gradient: bool, parity: bool) -> list[str]:
    rng = random.Random(seed)
    plans = [f"flip:server:*@step={rng.randint(3, 14)}:bit={rng.randint(0, 22)},seed={rng.randint(1, 999)}",
             f"flip:trainer:{rng.randint(0, 1)}@step={rng.randint(3, 30)}:bit={rng.randint(0, 22)}"]
    if checkpoints:  # after the checkpoint of step 19, before the next; its server dies two steps later
        server, step = rng.randrange(servers), rng.randint(21, 27)
        plans += [f"flip:server:{server}@step={step}:of=checkpoint", f"server:{server}@step={step + 2}"]
    # in transit (any bit: the server checks it before it applies anything), and a parity row
    rng2 = random.Random(seed * 7919)  # a second stream: the draws above stay those of earlier seeds
    if gradient:
        plans.append(f"flip:trainer:{rng2.randint(0, 1)}@step={rng2.randint(3, 34)}:of=gradient,"
                     f"bit={rng2.randint(0, 31)}")
    if parity:
        plans.append(f"flip:server:{rng2.randrange(servers)}@step={rng2.randint(3, 14)}:of=parity,"
                     f"seed={rng2.randint(1, 999)}")
    return plans


def test_every_variant_declares_what_the_matrix_checks():
    covers = {name: cover(args)[0] for name, args in VARIANTS}
    assert covers["none"].rows_within is None and not covers["none"].parts_refused
    assert covers["ckpt"].parts_refused and covers["ecrm-xor-verify"].rows_within == 2
    assert covers["ecrm-rs-scrub"].rows_repaired and not covers["ecrm-xor-verify"].rows_repaired


@pytest.mark.parametrize("variant", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_corruption_matrix(variant, tmp_path):
    name, args = variant
    claims, cfg = cover(args)
    seed = SEED + VARIANTS.index(variant)
    checksums, parity = cfg.failures.message_checksums, cfg.strategy.name == "ecrm"
    plans = draw(seed, cfg.layout.servers, claims.parts_refused, checksums, parity)
    flips = [p for p in plans if p.startswith("flip:")]
    run = mpiec(["run", *BASE, *args, *(x for p in plans for x in ("--kill", p)), "--timeout", "90"],
                out=tmp_path, timeout=150)
    where = f"{name} seed {seed} {plans}"
    tail = run.stdout[-2000:] + run.stderr[-2000:]
    assert run.code in (0, 1) and len(run.files) == 1, f"{where}: rc {run.code}\n{tail}"
    s = run.result().summary
    notes = {n["seq"]: n for n in json.loads(s["corruptions"])}  # flips numbered in plan order
    unfired = json.loads(s["corruptions_unfired"])
    assert len(notes) + len(unfired) == s["corruptions_planned"] == sum(p.startswith("flip:") for p in plans)
    row = notes[0]  # a row flip before any kill always fires
    if claims.rows_within is not None:
        found = row["detected_step"]
        assert found is not None and found - row["step"] <= claims.rows_within, f"{where}: {claims} but {row}"
    if claims.rows_repaired:
        assert row["repaired_step"] is not None, f"{where}: {claims} but {row}"
    gradient = next((notes.get(i) for i, p in enumerate(flips) if ":of=gradient" in p), None)
    if gradient is not None:  # refused before anything applied it, its step executed again
        assert (gradient["detected_step"], gradient["detected_by"], gradient["repaired_step"]) == \
            (gradient["step"], "message_corrupt", gradient["step"]), f"{where}: {gradient}"
    if parity:  # ecrm's checks see a parity row as they see a data row; rs locates and re-encodes it
        at = next(i for i, p in enumerate(flips) if ":of=parity" in p)
        if at in notes and claims.rows_within is not None:  # fired (else among the unfired, said why)
            found = notes[at]["detected_step"]
            assert found is not None and found - notes[at]["step"] <= claims.rows_within, \
                f"{where}: {notes[at]}"
            if claims.rows_repaired:
                assert notes[at]["repaired_step"] is not None, f"{where}: {notes[at]}"
    if claims.parts_refused and 2 in notes:  # fired: a checkpoint was complete at its step
        at_rest, resumed = notes[2], resumed_at(run.result())
        flipped = at_rest["checkpoint_step"]
        assert flipped + 1 not in resumed, f"{where}: restored from the flipped checkpoint {flipped}"
        # the restore read the flipped part and refused it, unless it restored from a newer checkpoint
        # (one whose commit came after the flip, on a loaded machine)
        assert at_rest["detected_by"] == "restore_failed" or (resumed and min(resumed) > flipped + 1), \
            f"{where}: {claims} but {at_rest}, resumed at {resumed}"
