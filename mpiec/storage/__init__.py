"""Storage: the model every checkpoint write and read goes through, and the checkpoint store.

* ``model`` — ``StorageModel`` (bandwidths, latency, the job's aggregate write bandwidth, cold
  reads), the named profiles and the ledger that paces the job's writes;
* ``checkpoint`` — ``CheckpointStore``: one checkpoint per step, complete or absent, plain ``.npy``
  files and a JSON manifest (``docs/checkpoints.md``).

A foundation wing (``tests/test_import_graph.py``): no MPI, no strategy, no role; the checkpointing
strategies (``mpiec.strategies.checkpointing``) build on it.
"""
