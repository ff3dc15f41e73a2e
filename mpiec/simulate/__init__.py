"""``mpiec simulate``: a discrete-event model of one DLRM training job at cluster scale, with each
fault-tolerance strategy's costs calibrated from measured result files.

Modules, one concern each: ``costs`` (the calibrated quantities and their JSON), ``calibrate``
(result files → costs), ``job`` (config → sizes, layout at N nodes), ``failures`` (node MTBF
processes, replays, traces, published rates), ``policies`` (costs + job → one strategy's seconds
and checkpoint interval, with the suite's interval rules), ``model`` (the event engine and the
figures of a simulated run), ``predict`` (measured runs replayed, predicted vs measured),
``scale`` (the sweep over node counts, crossovers, table, plot), ``reference`` (the shipped
calibration), ``cli`` (the command). docs/simulate.md describes the model and its validation.
"""

from .costs import Costs, load_costs
from .model import Failure, Outcome, Policy, simulate

__all__ = ["Costs", "Failure", "Outcome", "Policy", "load_costs", "simulate"]
