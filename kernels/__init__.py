"""Numba kernels (installed as mpiec.kernels): pure functions on arrays, no MPI, no I/O."""
