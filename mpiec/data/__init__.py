"""Data layer: counter-based RNG, synthetic Criteo-like source, real Criteo readers.

Everything here is MPI-free and deterministic: a sample, an initial embedding row or
a parameter is a pure function of the seed and its global index (see ``rng.py``).
"""

from mpiec.data.criteo import load_criteo_npz, load_criteo_tsv
from mpiec.data.rng import hash_normal, hash_u64, hash_uniform, init_embedding_rows
from mpiec.data.source import ArraySource, Batch, DataSource
from mpiec.data.synthetic import SyntheticCriteo, TeacherParams

__all__ = [
    "ArraySource",
    "Batch",
    "DataSource",
    "SyntheticCriteo",
    "TeacherParams",
    "hash_normal",
    "hash_u64",
    "hash_uniform",
    "init_embedding_rows",
    "load_criteo_npz",
    "load_criteo_tsv",
]
