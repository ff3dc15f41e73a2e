"""Numba kernels (installed as mpiec.kernels): pure functions on arrays, no MPI, no I/O.

Modules: ``gf256`` (GF(2^8) field, ISA-L Cauchy generator, bulk multiply-accumulate),
``codes`` (``make_code``: xor / rs / sum erasure codes over raw row bytes),
``embedding`` (ids, gather/scatter, pooling, SGD / row-wise Adagrad with fused deltas),
``tracking`` (modified-row bitsets, access counters), ``quantize`` (Check-N-Run
row-wise quantizers), ``rebuild`` (ecrm's rebuild rounds). See docs/kernels.md.

**Deferred in the command line's process** (``defer()``). Importing a kernel module imports
numba (0.3-0.5 CPU-s), yet ``mpiec``'s own process — the launcher, ``mpiec strategies``, the
bad-input paths, the reports — imports strategy modules, which name kernel modules, and calls no
kernel: ``mpiec.cli`` calls ``defer()`` first, which registers every module not yet imported with
``importlib.util.LazyLoader``: ``from mpiec.kernels import tracking`` then binds the module without
running it, and the first attribute read (``tracking.bitset_new``) loads it. (``from
mpiec.kernels.tracking import bitset_new`` still loads at once: a strategy module that the launcher
imports names the module, not its functions.) Ranks and other processes import modules as usual;
they run kernels in background threads, where Python 3.11's LazyLoader is not thread-safe.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

#: the kernel modules
MODULES = ("gf256", "embedding", "tracking", "codes", "parity", "rebuild", "quantize")


def defer() -> None:
    """Register every kernel module not yet imported as loaded on first attribute read."""
    for name in MODULES:
        _defer(name)


def _defer(name: str) -> None:
    full = f"{__name__}.{name}"
    if full in sys.modules:
        return
    spec = importlib.util.find_spec(full)
    if spec is None or spec.loader is None:  # pragma: no cover - an installation without the file
        raise ImportError(f"kernel module {full} not found")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)
    globals()[name] = module
