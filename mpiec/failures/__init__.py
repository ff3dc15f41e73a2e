"""Failures: what kills, stalls or crashes a rank, and how a run learns of it.

* ``faults`` — kill plans (syntax, validation) and their injection on each rank;
* ``traces`` — node-level fault traces replayed as kill plans;
* ``stall`` — the test hook that stalls one rank for a known time (``MPIEC_STALL``);
* ``crashes`` — the note a rank that dies of an exception leaves, so the run reads as crashed.

A foundation wing (``tests/test_import_graph.py``): it imports only the root's foundations
(``errors``, ``limits``, ``inputs``, ``layout``), never a strategy, a role or the launcher.
"""
