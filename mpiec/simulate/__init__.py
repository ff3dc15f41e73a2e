"""``mpiec simulate``: a discrete-event model of one DLRM training job at cluster scale, with each
fault-tolerance strategy's costs calibrated from measured result files.

Modules, one concern each: ``costs`` (the calibrated quantities and their JSON), ``calibrate``
(result files → costs), ``job`` (config → sizes, layout at N nodes, strong or weak scaling),
``step`` (a step's critical path from the CPU per step by role, protection work overlapped),
``access`` (distinct rows touched, from the tables' power law), ``checkpoint_io`` (writes and
reads through the job's storage), ``diffs`` (cnr's chain sizes and quantization), ``failures``
(node lifetime processes, lemons, repairs, bursts, replays, traces, published rates),
``failure_args`` (their flags), ``policies`` (costs + job + cluster → one strategy's seconds and
checkpoint interval, with the suite's interval rules), ``model`` (the event engine and the figures
of a simulated run), ``predict`` (measured runs replayed, predicted vs measured), ``scale`` (the
sweep over node counts in trials until the intervals are narrow, crossovers, table, plot),
``papers`` / ``paper_run`` (the seed papers' setups and their verdicts), ``corruption`` (silent
corruptions: the published prevalence, an assumed rate band, each strategy's declaration),
``reference`` (the shipped calibration), ``cli`` (the command). docs/simulate.md describes the
model and its validation.
"""

from .costs import Costs, load_costs
from .model import Failure, Outcome, Policy, simulate

__all__ = ["Costs", "Failure", "Outcome", "Policy", "load_costs", "simulate"]
