"""mpiec's trainer step against a PyTorch DLRM (facebookresearch/dlrm's architecture), interleaved.

Both sides train the same model (bottom MLP, sum-pooled embedding bags, dot interaction, top MLP,
sigmoid + binary cross-entropy) on the same synthetic batches, with Adagrad (or SGD) and the same
global batch (``--trainers`` x the preset's batch size), single-threaded on the same core: the
setting of an mpiec run, one BLAS thread per rank. Per global step:

* **mpiec** (this process): for each trainer, route the batch's ids (``route_rows``), gather the
  rows from the servers' tables, ``pool_bags``, then per virtual shard it holds (``layout.
  virtual_trainers``, default 4: two per trainer of 2) ``forward_backward`` and
  ``pool_bags_backward``, summed in the fixed tree (``roles.shards.block_gradients``); the dense
  gradients of the trainers' blocks summed in the tree; each server sums its rows' gradients in
  the tree (``sum_pushes``) and applies row-wise Adagrad (``adagrad_apply``); the dense Adagrad
  update. What an mpiec run
  does on its trainers and servers, less the MPI exchanges and the data generation (timed apart).
* **PyTorch** (a worker in a separate environment, ``--torch-python``): ``nn.EmbeddingBag(mode=
  "sum", sparse=True)`` per table, ``nn.Linear`` + ReLU layers, ``torch.bmm`` dot interaction with
  the strictly-lower pairs, ``nn.BCELoss``, ``torch.optim.Adagrad`` over all parameters (sparse
  embedding gradients) -- dlrm_s_pytorch.py's model and optimizer, written from its description.

Rounds alternate A B / B A; every figure is a median over rounds with its interquartile range.
Samples/s are per second of CPU time of the process (robust on a machine shared with other work;
the wall figures are printed beside them). Then the MLP part alone on a larger preset's MLP sizes
(``--mlp-preset``, default criteo-kaggle) in GFLOP/s against the core's FP32 peak, estimated as
``FMA pipes x SIMD lanes x 2 x clock``: lanes and pipes from ``lscpu`` (AVX-512: 16 lanes; Zen 5
and Intel server cores: 2 FMA pipes of 512 bits, Zen 4: 2 of 256 bits, AVX2: 2 x 8 lanes), the
clock measured by a chain of dependent integer adds (one per cycle).

    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    python scripts/trainer_vs_pytorch.py --torch-python /tmp/torchenv/bin/python

PyTorch is not a dependency of mpiec: without ``--torch-python`` only mpiec's side is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread: the setting of a rank (mpiec/worker.py)

import numpy as np  # noqa: E402

# --------------------------------------------------------------------------- PyTorch worker


def torch_worker(npz: str, threads: int) -> None:  # pragma: no cover - runs in the torch env
    """Build the PyTorch DLRM for the batches in ``npz``; answer ``run N`` lines with timings."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    z = np.load(npz)
    cfg = json.loads(str(z["cfg"]))
    cards, dim, bags = cfg["cards"], cfg["dim"], cfg["bags"]
    n_t = len(cards)

    def mlp(sizes: list[int], sigmoid_last: bool) -> torch.nn.Sequential:
        layers: list[torch.nn.Module] = []
        for k in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[k], sizes[k + 1]))
            last = k == len(sizes) - 2
            layers.append(torch.nn.Sigmoid() if (last and sigmoid_last) else torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    class DLRM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.ModuleList(
                [torch.nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cards])
            for e in self.emb:  # dlrm's uniform(-1/sqrt(n), 1/sqrt(n)) rows
                torch.nn.init.uniform_(e.weight, -(e.num_embeddings ** -0.5), e.num_embeddings ** -0.5)
            self.bot = mlp([cfg["n_dense"], *cfg["bottom"], dim], False)
            n = n_t + 1
            self.top = mlp([dim + n * (n - 1) // 2, *cfg["top"], 1], True)
            self.li = torch.tensor([i for i in range(n) for j in range(i)])
            self.lj = torch.tensor([j for i in range(n) for j in range(i)])

        def forward(self, dense, idx, offs):
            x = self.bot(dense)
            ly = [e(idx[t], offs[t]) for t, e in enumerate(self.emb)]
            T = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, dim)
            Z = torch.bmm(T, T.transpose(1, 2))
            return self.top(torch.cat([x, Z[:, self.li, self.lj]], dim=1))

    model = DLRM()
    emb_params = list(model.emb.parameters())
    dense_params = list(model.bot.parameters()) + list(model.top.parameters())
    opt_cls = torch.optim.Adagrad if cfg["optimizer"] == "adagrad" else torch.optim.SGD
    opt = opt_cls([{"params": emb_params, "lr": cfg["lr"]},
                   {"params": dense_params, "lr": cfg["dense_lr"]}])
    loss_fn = torch.nn.BCELoss(reduction="mean")
    bounds = np.concatenate([[0], np.cumsum(bags)])
    steps = []
    for s in range(z["dense"].shape[0]):
        ids = z["ids"][s]  # [global batch, n_ids]
        bsz = ids.shape[0]
        idx = [torch.from_numpy(np.ascontiguousarray(ids[:, bounds[t]:bounds[t + 1]]).reshape(-1))
               for t in range(n_t)]
        offs = [torch.arange(bsz) * int(bags[t]) for t in range(n_t)]
        steps.append((torch.from_numpy(z["dense"][s]), idx, offs,
                      torch.from_numpy(z["labels"][s]).reshape(-1, 1)))
    print("ready", flush=True)
    k = 0
    for line in sys.stdin:
        if not line.startswith("run"):
            break
        cpu, wall = [], []
        for _ in range(int(line.split()[1])):
            dense, idx, offs, y = steps[k % len(steps)]
            k += 1
            c0, w0 = time.process_time(), time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(model(dense, idx, offs), y)
            loss.backward()
            opt.step()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        print(json.dumps({"cpu": cpu, "wall": wall, "loss": loss.item()}), flush=True)


# --------------------------------------------------------------------------- mpiec side


def _route_rows(ids, col, pl, n_data, base):
    """The trainer's routing: ``route_rows``, or the numpy formula of the code before it."""
    try:
        from mpiec.roles.trainer import route_rows
    except ImportError:  # a checkout from before route_rows (for a before/after table)
        from mpiec.kernels.embedding import unique_inverse

        uniq, inv = unique_inverse((ids + col).ravel())
        owner = pl.owner(uniq)
        order = np.argsort(owner, kind="stable")
        pos = np.empty_like(order)
        pos[order] = np.arange(order.size)
        counts = np.zeros(n_data, dtype=np.int64)
        counts[base:base + pl.servers] = np.bincount(owner, minlength=pl.servers)
        return pl.local_slot(uniq[order]), counts, pos[inv]
    return route_rows(ids, col, pl, n_data, base)


class MpiecStep:
    """One global step of mpiec's training computation, all trainers and servers in this process."""

    # fwd_bwd: each virtual shard's forward_backward and pool_bags_backward, and the block's tree
    # dense_apply: the trainers' dense blocks summed in the tree, and the dense optimizer
    PHASES = ("route", "gather", "pool", "fwd_bwd", "server_apply", "dense_apply")

    def __init__(self, cfg, batches) -> None:
        from mpiec.data.source import bag_bounds
        from mpiec.layout import stripe_placement, table_offsets, trainer_blocks
        from mpiec.model.dlrm import init_params
        from mpiec.roles.trainer import model_shape

        self.cfg, self.batches = cfg, batches
        self.shape = model_shape(cfg)
        self.T = cfg.layout.trainers
        self.V = cfg.virtual_trainers  # virtual shards of a step (layout.virtual_trainers)
        self.blocks = trainer_blocks(self.T, self.V)
        self.S = cfg.layout.servers
        self.gb = float(cfg.global_batch)
        offsets = table_offsets(cfg.data.cardinalities)
        self.col = np.repeat(offsets[:-1], cfg.data.bags)
        self.pl = stripe_placement(cfg.layout, int(offsets[-1]))
        self.bounds = bag_bounds(cfg.data.bags)
        self.adagrad = cfg.training.optimizer == "adagrad"
        width = self.shape.dim + (1 if self.adagrad else 0)
        rng = np.random.default_rng(cfg.training.seed)
        self.tables = [(rng.standard_normal((self.pl.n_local(s), width)) * 0.01).astype(np.float32)
                       for s in range(self.S)]
        for t in self.tables:
            t[:, self.shape.dim:] = 0
        self.params = init_params(self.shape, cfg.training.seed)
        self.state = np.zeros_like(self.params)
        self.k = 0
        self.loss = 0.0

    def step(self, times: dict[str, float]) -> None:
        from mpiec.kernels.embedding import adagrad_apply, gather_rows, sgd_apply

        from mpiec.model.dlrm import pool_bags
        from mpiec.roles.shards import block_gradients, merge_arrays, sum_pushes, tree_sum
        clock = time.thread_time
        tr = self.cfg.training
        dim = self.shape.dim
        parts = self.batches[self.k % len(self.batches)]
        self.k += 1
        dense_nodes: dict[tuple[int, int], np.ndarray] = {}
        pushed: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(self.S)]
        for b, block in zip(parts, self.blocks, strict=True):  # trainers in index order
            t0 = clock()
            slots, counts, inv = _route_rows(b.ids, self.col, self.pl, self.T + self.S, self.T)
            t1 = clock()
            per = counts[self.T:]
            rows = np.empty((slots.size, dim), dtype=np.float32)
            o = 0
            for s in range(self.S):  # the servers' gather (serve)
                gather_rows(self.tables[s], slots[o:o + per[s]], dim, rows[o:o + per[s]])
                o += per[s]
            t2 = clock()
            index = inv.reshape(b.ids.shape)
            emb = pool_bags(rows, index, self.bounds)
            t3 = clock()
            # the trainer's virtual shards, each a forward/backward and its bags' backward, summed in
            # the fixed tree (Trainer.shard_gradients)
            node, grows = block_gradients(self.shape, self.params, b.dense, emb, b.labels, index, self.bounds,
                                          slots.size, int(self.gb), self.V, block)
            t4 = clock()
            dense_nodes[block] = node
            o = 0
            for s in range(self.S):
                pushed[s].append((slots[o:o + per[s]], grows[o:o + per[s]]))
                o += per[s]
            times["route"] += t1 - t0
            times["gather"] += t2 - t1
            times["pool"] += t3 - t2
            times["fwd_bwd"] += t4 - t3
        t0 = clock()
        for s in range(self.S):  # Server.apply: each row's gradients summed in the tree, update
            sl = np.concatenate([p[0] for p in pushed[s]])
            gr = np.concatenate([p[1] for p in pushed[s]])
            uniq, acc = sum_pushes(sl, gr, np.array([p[0].size for p in pushed[s]]), self.V)
            if self.adagrad:
                adagrad_apply(self.tables[s], uniq, acc, tr.lr, tr.eps)
            else:
                sgd_apply(self.tables[s], uniq, acc, tr.lr)
        t1 = clock()
        root = tree_sum(dense_nodes, 0, self.V, merge_arrays) if self.T > 1 else dense_nodes[(0, self.V)]
        dense_g, loss = root[:-1], float(root[-1])  # Trainer.reduce_dense
        if tr.dense_optimizer == "adagrad":  # Trainer.apply_dense
            self.state += dense_g * dense_g
            self.params -= np.float32(tr.dense_lr) * dense_g / (np.sqrt(self.state) + np.float32(tr.eps))
        else:
            self.params -= np.float32(tr.dense_lr) * dense_g
        t2 = clock()
        times["server_apply"] += t1 - t0
        times["dense_apply"] += t2 - t1
        self.loss = loss / self.gb

    def run(self, n: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"cpu": [], "wall": []}
        phases = {p: 0.0 for p in self.PHASES}
        for _ in range(n):
            c0, w0 = time.thread_time(), time.perf_counter()
            self.step(phases)
            out["cpu"].append(time.thread_time() - c0)
            out["wall"].append(time.perf_counter() - w0)
        for p in self.PHASES:
            out[p] = [phases[p] / n]
        return out


# --------------------------------------------------------------------------- peak and MLP


def _clock_ghz() -> float:
    """The core's clock from a dependent chain of shifts and xors (xorshift64: 6 one-cycle
    operations in a row per iteration, that no compiler folds), in CPU time; best of 7."""
    from numba import njit

    @njit
    def chain(n, x):
        for _ in range(n):
            x ^= x << np.uint64(13)
            x ^= x >> np.uint64(7)
            x ^= x << np.uint64(17)
        return x

    chain(10, np.uint64(1))
    best = 0.0
    for _ in range(7):
        n = 10_000_000
        t0 = time.thread_time()
        chain(n, np.uint64(88172645463325252))
        best = max(best, 6 * n / (time.thread_time() - t0) / 1e9)
    return best


def fp32_peak_per_core(ghz: float) -> tuple[float, str]:
    """FP32 FLOP/s of one core and how it was estimated (from lscpu's flags and family)."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    flags = set()
    vendor = family = ""
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "Flags":
            flags = set(val.split())
        elif key.strip() == "Vendor ID":
            vendor = val.strip()
        elif key.strip() == "CPU family":
            family = val.strip()
    fma = 2 if "fma" in flags else 1
    if "avx512f" in flags and not (vendor == "AuthenticAMD" and family == "25"):
        lanes, pipes, why = 16, 2, "AVX-512: 16 FP32 lanes, 2 FMA pipes of 512 bits"
        if vendor == "AuthenticAMD":
            why += f" (AMD family {family}: Zen 5)"
    elif "avx512f" in flags:
        lanes, pipes, why = 8, 2, "AVX-512 on Zen 4: 2 FMA pipes of 256 bits"
    elif "avx2" in flags or "avx" in flags:
        lanes, pipes, why = 8, 2, "AVX2: 8 FP32 lanes, 2 FMA pipes"
    else:
        lanes, pipes, why = 4, 2, "SSE: 4 FP32 lanes, 2 pipes"
    peak = pipes * lanes * fma * ghz * 1e9
    return peak, f"{why} x {fma} FLOP per FMA x {ghz:.2f} GHz (measured) = {peak / 1e9:.0f} GFLOP/s per core"


def mlp_flops(shape, bsz: int) -> tuple[float, float]:
    """FLOPs of one forward+backward of the MLPs (GEMMs only) and of the interaction."""
    from mpiec.model.dlrm import layer_dims

    bot, top = layer_dims(shape)
    f = 0.0
    for k, (fi, fo) in enumerate(bot + top):
        f += 2 * bsz * fi * fo * (3 if k > 0 else 2)  # forward, weight grad, input grad (not layer 0)
    n = shape.n_tables + 1
    inter = 3 * 2 * bsz * (n * (n - 1) // 2) * shape.dim  # forward dots, two backward products
    return f, inter


def mlp_part(preset: str, rounds: int) -> dict:
    """GFLOP/s of the MLP part of ``forward_backward`` on ``preset``'s MLP sizes and batch."""
    from mpiec.launch.resolve import load_config
    from mpiec.model.dlrm import forward_backward, init_params
    from mpiec.roles.trainer import model_shape

    try:
        from mpiec.model.interaction import interact_bwd, interact_fwd
    except ImportError:  # a checkout from before interaction.py: the scalar kernels
        from mpiec.model.dlrm import _interact_bwd, _interact_fwd

        def interact_fwd(x, emb, out, c0):
            _interact_fwd(x, emb, out[:, c0:])

        def interact_bwd(x, emb, g, c0, gx, ge):
            _interact_bwd(x, emb, g[:, c0:], gx, ge)

    cfg = load_config(preset=preset, memory=False)
    shape = model_shape(cfg)
    bsz = cfg.training.batch_size
    rng = np.random.default_rng(0)
    p = init_params(shape, 1)
    dense = rng.random((bsz, shape.n_dense)).astype(np.float32)
    emb = (rng.standard_normal((bsz, shape.n_tables, shape.dim)) * 0.1).astype(np.float32)
    y = (rng.random(bsz) < 0.25).astype(np.float32)
    x = np.maximum(rng.standard_normal((bsz, shape.dim)), 0).astype(np.float32)
    out = np.empty((bsz, shape.n_interactions), np.float32)
    gx = np.zeros((bsz, shape.dim), np.float32)
    ge = np.empty_like(emb)
    fb, it = [], []
    forward_backward(shape, p, dense, emb, y, float(bsz))
    for _ in range(rounds):
        c0 = time.thread_time()
        forward_backward(shape, p, dense, emb, y, float(bsz))
        c1 = time.thread_time()
        interact_fwd(x, emb, out, 0)
        interact_bwd(x, emb, out, 0, gx, ge)
        c2 = time.thread_time()
        fb.append(c1 - c0)
        it.append(c2 - c1)
    f_mlp, f_int = mlp_flops(shape, bsz)
    t_fb, t_int = float(np.median(fb)), float(np.median(it))
    return {"preset": preset, "batch": bsz, "bottom": list(shape.bottom), "top": list(shape.top),
            "fwd_bwd_ms": t_fb * 1e3, "interaction_ms": t_int * 1e3,
            "mlp_gflop": f_mlp / 1e9, "mlp_gflops": f_mlp / max(t_fb - t_int, 1e-9) / 1e9,
            "fwd_bwd_gflops": (f_mlp + f_int) / t_fb / 1e9}


# --------------------------------------------------------------------------- driver


def _q(v) -> tuple[float, float, float]:
    a = np.asarray(v, dtype=float)
    return float(np.median(a)), float(np.percentile(a, 25)), float(np.percentile(a, 75))


def _blas_core() -> str:
    import ctypes
    import glob

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for lib in libs:
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename"):
            try:
                f = getattr(ctypes.CDLL(lib), name)
            except (AttributeError, OSError):
                continue
            f.restype = ctypes.c_char_p
            return f"OpenBLAS {f().decode()}"
    return "unknown BLAS"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="laptop")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--torch-python", default="", help="python of an environment with torch (none: skip)")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (A B, then B A, ...)")
    ap.add_argument("--steps", type=int, default=8, help="global steps per side per round")
    ap.add_argument("--batches", type=int, default=4, help="distinct global batches, cycled")
    ap.add_argument("--mlp-preset", default="criteo-kaggle", help="preset whose MLP sizes the MLP part uses")
    ap.add_argument("--json", default="", help="write the figures to this file")
    ap.add_argument("--torch-worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, args.threads)
        return 0

    from mpiec.data.factory import make_source
    from mpiec.launch.resolve import load_config

    cfg = load_config(preset=args.preset, sets=args.set, memory=False)
    T, B = cfg.layout.trainers, cfg.training.batch_size
    src = make_source(cfg)
    batches, gen = [], []
    for s in range(args.batches):
        parts = []
        for t in range(T):
            c0 = time.thread_time()
            parts.append(src.batch((s * T + t) * B, B))
            gen.append(time.thread_time() - c0)
        batches.append(parts)
    gen_ms = float(np.median(gen[T:] or gen)) * 1e3
    mp = MpiecStep(cfg, batches)
    mp.run(3)  # compile and warm

    worker = None
    tmp = tempfile.TemporaryDirectory()
    if args.torch_python:
        npz = Path(tmp.name) / "batches.npz"
        d = cfg.data
        meta = {"cards": list(d.cardinalities), "bags": list(cfg.data.bags), "dim": cfg.model.dim,
                "bottom": list(cfg.model.bottom), "top": list(cfg.model.top), "n_dense": 13,
                "optimizer": cfg.training.optimizer, "lr": cfg.training.lr, "dense_lr": cfg.training.dense_lr}
        np.savez(npz, cfg=json.dumps(meta),
                 dense=np.stack([np.concatenate([b.dense for b in p]) for p in batches]),
                 ids=np.stack([np.concatenate([b.ids for b in p]) for p in batches]),
                 labels=np.stack([np.concatenate([b.labels for b in p]) for p in batches]))
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        worker = subprocess.Popen([args.torch_python, __file__, "--torch-worker", str(npz), "--threads", "1"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert worker.stdin is not None and worker.stdout is not None
        if worker.stdout.readline().strip() != "ready":
            raise SystemExit("the PyTorch worker did not start")

    def run_torch(n: int) -> dict:
        assert worker is not None and worker.stdin is not None and worker.stdout is not None
        worker.stdin.write(f"run {n}\n")
        worker.stdin.flush()
        return json.loads(worker.stdout.readline())

    if worker is not None:
        run_torch(3)
    gbatch = T * B
    rows: dict[str, list[float]] = {k: [] for k in ("m_cpu", "m_wall", "t_cpu", "t_wall", "ratio_cpu",
                                                    "ratio_wall", *MpiecStep.PHASES)}
    load0 = os.getloadavg()[0]
    for r in range(args.rounds):
        order = ("m", "t") if r % 2 == 0 else ("t", "m")
        res = {}
        for side in order:
            if side == "m":
                res["m"] = mp.run(args.steps)
            elif worker is not None:
                res["t"] = run_torch(args.steps)
        m = res["m"]
        rows["m_cpu"].append(gbatch / float(np.median(m["cpu"])))
        rows["m_wall"].append(gbatch / float(np.median(m["wall"])))
        for p in MpiecStep.PHASES:
            rows[p].append(m[p][0] * 1e3)
        if "t" in res:
            rows["t_cpu"].append(gbatch / float(np.median(res["t"]["cpu"])))
            rows["t_wall"].append(gbatch / float(np.median(res["t"]["wall"])))
            rows["ratio_cpu"].append(rows["m_cpu"][-1] / rows["t_cpu"][-1])
            rows["ratio_wall"].append(rows["m_wall"][-1] / rows["t_wall"][-1])
    if worker is not None and worker.stdin is not None:
        worker.stdin.write("quit\n")
        worker.stdin.flush()
        worker.wait(timeout=60)
    load1 = os.getloadavg()[0]

    ghz = _clock_ghz()
    peak, how = fp32_peak_per_core(ghz)
    mlp = mlp_part(args.mlp_preset, max(args.rounds, 7))
    out = {"preset": args.preset, "trainers": T, "batch": B, "global_batch": gbatch,
           "optimizer": cfg.training.optimizer, "dense_optimizer": cfg.training.dense_optimizer,
           "rounds": args.rounds, "steps": args.steps, "blas": _blas_core(), "load": [load0, load1],
           "data_ms_per_trainer_batch": gen_ms, "peak_gflops_per_core": peak / 1e9, "peak_how": how,
           "mlp": mlp, "mlp_peak_share": mlp["mlp_gflops"] * 1e9 / peak}
    for k, v in rows.items():
        if v:
            out[k] = _q(v)

    def fmt(k: str, scale: float = 1e-3, unit: str = "k") -> str:
        m, lo, hi = out[k]
        return f"{m * scale:8.1f}{unit} [{lo * scale:.1f}-{hi * scale:.1f}]"

    print(f"{args.preset}: {T} trainers x {B} = global batch {gbatch}, {cfg.training.optimizer} "
          f"(dense {cfg.training.dense_optimizer}), 1 thread each, {_blas_core()}; "
          f"{args.rounds} interleaved rounds x {args.steps} steps; load {load0:.1f} -> {load1:.1f}")
    print("mpiec phases, ms of CPU per global step (median [IQR]):")
    for p in MpiecStep.PHASES:
        print(f"  {p:13s} {fmt(p, 1.0, ' ms')}")
    print(f"  (data generation, not in the step: {gen_ms:.3f} ms per trainer batch)")
    print(f"mpiec    samples/s  CPU {fmt('m_cpu')}   wall {fmt('m_wall')}")
    if rows["t_cpu"]:
        print(f"PyTorch  samples/s  CPU {fmt('t_cpu')}   wall {fmt('t_wall')}")
        print(f"ratio mpiec/PyTorch CPU {fmt('ratio_cpu', 1.0, 'x')}   wall {fmt('ratio_wall', 1.0, 'x')}")
    print(f"peak: {how}")
    print(f"MLP part, {args.mlp_preset} sizes (bottom {mlp['bottom']}, top {mlp['top']}, "
          f"batch {mlp['batch']}): "
          f"{mlp['mlp_gflop']:.2f} GFLOP in {mlp['fwd_bwd_ms'] - mlp['interaction_ms']:.2f} ms = "
          f"{mlp['mlp_gflops']:.0f} GFLOP/s, {100 * out['mlp_peak_share']:.0f} % of one core's FP32 peak "
          f"(forward_backward with the interaction: {mlp['fwd_bwd_gflops']:.0f} GFLOP/s)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
