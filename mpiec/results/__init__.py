"""Results: the HDF5 result file of a run and the figures the monitor derives for it.

* ``file`` — the file's schema, its atomic writer and its validating reader
  (``docs/results-schema.md``);
* ``accounting`` — the headline figures (timeline, time lost, recoveries, their breakdown) the
  monitor computes from the ranks' reports and the studies read back.

``from mpiec.results import read_result, decode`` is the public path users, the analysis and the
studies import: this package re-exports the public names of ``file`` (its ``__all__``), nothing
else. A foundation wing (``tests/test_import_graph.py``): no MPI, no strategy, no role.
"""

from mpiec.results.file import *  # noqa: F403 (the public path: exactly file.__all__)
from mpiec.results.file import __all__ as __all__
