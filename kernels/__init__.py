"""Numba kernels (installed as mpiec.kernels): pure functions on arrays, no MPI, no I/O.

Modules: ``gf256`` (GF(2^8) field, ISA-L Cauchy generator, bulk multiply-accumulate),
``codes`` (``make_code``: xor / rs / sum erasure codes over raw row bytes),
``embedding`` (ids, gather/scatter, pooling, SGD / row-wise Adagrad with fused deltas),
``tracking`` (modified-row bitsets, access counters), ``quantize`` (Check-N-Run
row-wise quantizers), ``bench`` (the ``mpiec kernels`` micro-benchmark).
See docs/kernels.md.
"""
