#!/usr/bin/env python
"""Single-process reference trainer used to tune the synthetic teacher and the presets.

Owns nothing the runtime imports: it reproduces, in one process, the math of the
distributed runtime — data-parallel trainers with local batch ``B`` (so a global
batch ``G = trainers * B`` and loss scale ``G``), embedding rows updated with
row-wise Adagrad (``acc += mean(g^2)``, ``w -= lr * g / (sqrt(acc) + eps)``) where
``g`` is the row's gradient summed over the global batch, and the flat dense vector
updated with SGD or (elementwise) Adagrad — and prints the teacher's AUC and the
model's held-out AUC/logloss every ``--eval-every`` steps.

    python scripts/tune_teacher.py --preset laptop
    python scripts/tune_teacher.py --preset tiny --steps 200
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core, as one rank of the runtime

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from mpiec.config import PRESETS  # noqa: E402
from mpiec.data.rng import init_embedding_rows  # noqa: E402
from mpiec.data.synthetic import SyntheticCriteo, TeacherParams  # noqa: E402
from mpiec.launch.resolve import load_config
from mpiec.model.dlrm import DLRMShape, forward_backward, init_params, predict  # noqa: E402
from mpiec.model.metrics import auc, logloss  # noqa: E402

EPS = 1e-8


class Tables:
    """Embedding tables (lazily initialized rows, as the servers would) + row-wise Adagrad."""

    def __init__(self, seed: int, cards, dim: int, lr: float) -> None:
        self.seed, self.cards, self.dim, self.lr = seed, list(cards), dim, lr
        self.w = [np.zeros((0, dim), np.float32) for _ in cards]
        self.acc = [np.zeros(0, np.float32) for _ in cards]
        self.rows: list[dict] = [dict() for _ in cards]  # global id -> local row (sparse)
        self.dense_tables = [c <= 2_000_000 for c in cards]
        for t, c in enumerate(self.cards):
            if self.dense_tables[t]:
                self.w[t] = init_embedding_rows(seed, t, c, np.arange(c), dim)
                self.acc[t] = np.zeros(c, np.float32)

    def _local(self, t: int, ids: np.ndarray) -> np.ndarray:
        if self.dense_tables[t]:
            return ids
        m = self.rows[t]
        new = [i for i in np.unique(ids).tolist() if i not in m]
        if new:
            base = len(m)
            for k, i in enumerate(new):
                m[i] = base + k
            rows = init_embedding_rows(self.seed, t, self.cards[t], np.array(new), self.dim)
            self.w[t] = np.concatenate([self.w[t], rows])
            self.acc[t] = np.concatenate([self.acc[t], np.zeros(len(new), np.float32)])
        return np.array([m[i] for i in ids.tolist()], dtype=np.int64)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        loc = [self._local(t, ids[:, t]) for t in range(ids.shape[1])]
        emb = np.stack([self.w[t][loc[t]] for t in range(ids.shape[1])], axis=1)
        return emb, loc

    def update(self, loc: list[np.ndarray], grad_emb: np.ndarray) -> None:
        for t, rows in enumerate(loc):
            u, inv = np.unique(rows, return_inverse=True)
            g = np.zeros((u.size, self.dim), np.float32)
            np.add.at(g, inv, grad_emb[:, t, :])
            acc = self.acc[t][u] + np.mean(g * g, axis=1)
            self.acc[t][u] = acc
            self.w[t][u] -= self.lr * g / (np.sqrt(acc)[:, None] + EPS)


def evaluate(shape, params, tables, ev, chunk=8192):
    probs = np.empty(len(ev), np.float32)
    for s in range(0, len(ev), chunk):
        emb, _ = tables.lookup(ev.ids[s : s + chunk])
        probs[s : s + chunk] = predict(shape, params, ev.dense[s : s + chunk], emb)
    return auc(ev.labels, probs), logloss(ev.labels, probs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="laptop", choices=PRESETS)
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                    help="override a config key, as with 'mpiec run --set'")
    ap.add_argument("--teacher-only", action="store_true", help="only print the teacher AUC")
    ap.add_argument("--head", type=float, default=None, help="teacher head (TeacherParams)")
    ap.add_argument("--decay", type=float, default=None, help="teacher decay (TeacherParams)")
    a = ap.parse_args()
    c = load_config(a.preset, sets=a.sets)  # the preset TOMLs are the one source of values
    a.seed = c.training.seed
    cfg = dict(dim=c.model.dim, bottom=tuple(c.model.bottom), top=tuple(c.model.top),
               trainers=c.layout.trainers, local_batch=c.training.batch_size, steps=c.training.steps,
               emb_lr=c.training.lr, dense_lr=c.training.dense_lr, dense_opt=c.training.dense_optimizer,
               eval_count=c.data.eval_samples, eval_every=c.training.eval_every or c.training.steps)
    data = {"cardinalities": tuple(c.data.cardinalities), "zipf_exponent": c.data.zipf_exponent,
            "teacher": TeacherParams()}
    teacher = data["teacher"]
    if a.head is not None:
        teacher = dataclasses.replace(teacher, head=a.head)
    if a.decay is not None:
        teacher = dataclasses.replace(teacher, decay=a.decay)
    zipf = data["zipf_exponent"]
    src = SyntheticCriteo(a.seed, data["cardinalities"], zipf, teacher=teacher)
    t0 = time.perf_counter()
    ev = src.eval_batch(cfg["eval_count"])
    tauc = src.teacher_auc(cfg["eval_count"])
    print(f"preset={a.preset} teacher={teacher} zipf={zipf}")
    print(f"config={cfg}")
    print(f"teacher AUC={tauc:.4f} on {len(ev)} eval samples, CTR={ev.labels.mean():.3f}"
          f" ({time.perf_counter() - t0:.2f}s)")
    if a.teacher_only:
        return
    shape = DLRMShape(13, len(data["cardinalities"]), cfg["dim"], cfg["bottom"], cfg["top"])
    params = init_params(shape, a.seed)
    dacc = np.zeros_like(params)
    tables = Tables(a.seed, data["cardinalities"], cfg["dim"], cfg["emb_lr"])
    G = cfg["trainers"] * cfg["local_batch"]
    t_fb = t_gen = 0.0
    t0 = time.perf_counter()
    for step in range(1, cfg["steps"] + 1):
        t = time.perf_counter()
        b = src.batch((step - 1) * G, G)
        t_gen += time.perf_counter() - t
        emb, loc = tables.lookup(b.ids)
        grad = np.zeros_like(params)
        t = time.perf_counter()
        for r in range(cfg["trainers"]):  # each trainer's local batch, loss scale = G
            sl = slice(r * cfg["local_batch"], (r + 1) * cfg["local_batch"])
            _, _, g, ge = forward_backward(shape, params, b.dense[sl], emb[sl], b.labels[sl], G)
            grad += g
            emb[sl] = ge  # reuse the buffer for the embedding gradients
        t_fb += time.perf_counter() - t
        if cfg["dense_opt"] == "adagrad":
            dacc += grad * grad
            params -= cfg["dense_lr"] * grad / (np.sqrt(dacc) + EPS)
        else:
            params -= cfg["dense_lr"] * grad
        tables.update(loc, emb)
        if step % cfg["eval_every"] == 0 or step == cfg["steps"]:
            ma, ml = evaluate(shape, params, tables, ev)
            print(f"step {step:5d} samples {step * G / 1e6:6.2f}M  AUC {ma:.4f} "
                  f"(teacher {tauc:.4f}, gap {tauc - ma:+.4f})  logloss {ml:.4f}  "
                  f"t={time.perf_counter() - t0:6.1f}s", flush=True)
    print(f"time: total {time.perf_counter() - t0:.1f}s, generator {t_gen:.1f}s, "
          f"forward_backward {t_fb:.1f}s ({t_fb / cfg['steps'] / cfg['trainers'] * 1e3:.1f} "
          f"ms per local batch of {cfg['local_batch']})")


if __name__ == "__main__":
    main()
