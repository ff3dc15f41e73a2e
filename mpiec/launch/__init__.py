"""Launch: from a config's layers to ranks running under ``mpiexec``, and back to a result.

* ``resolve`` — layers → the run's config, its typed strategy, its kill plans, the checks across
  sections;
* ``launcher`` — the ``mpiexec`` command line, the run's process group, the names a run writes;
* ``stacks`` — every rank's stack dump when a run passes its time limit;
* ``stopped_result`` — the result file of a run the launcher ended with nobody left to write it;
* ``bench`` — ``mpiec bench``: every strategy through the launcher, failure-free and under one
  scenario, then one comparison.

Layering (``tests/test_import_graph.py``): above the foundations and the strategy registry, below
the roles and the entry points; nothing here imports a role, ``mpiec.worker`` or ``mpiec.cli``.
"""
