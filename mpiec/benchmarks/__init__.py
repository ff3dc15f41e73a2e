"""The developer benchmarks, in one place: what the hot paths cost on this machine.

* ``kernels_cli`` — ``mpiec kernels``: the command that composes the three below;
* ``kernels`` — the pure kernels beside a memory copy, and the parity pipeline's stages in one
  process;
* ``parity_pipeline`` — ``ecrm``'s delta exchange between two ranks under ``mpiexec -n 2``;
* ``checkpoint_paths`` — what the checkpointing strategies do to a shard's bytes, beside a copy;
* ``checkpoint_cost`` — ``python -m mpiec.benchmarks.checkpoint_cost``: the disk, the checksums
  and a background checkpoint writer beside a training-like loop.

A benchmark reaches a strategy only through its public surface (``tests/test_import_graph.py``):
the registry, ``mpiec.strategies.api`` and the names a strategy's package exports
(``mpiec.strategies.ecrm``, ``mpiec.strategies.cnr`` ...), never a strategy's inner modules.
"""
