"""mpiec: MPI benchmark suite for fault-tolerant DLRM training."""

__version__ = "0.1.0"
