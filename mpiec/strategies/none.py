"""``none``: no protection. The reference throughput; a failure loses the job.

Every agent is the base one (``strategies.agents``): no hook does anything, the coordinator's
plan aborts.
"""

from mpiec.strategies.api.base import Strategy
from mpiec.strategies.api.costs import CostModel


class NoProtection(Strategy):
    name = "none"
    description = "no protection: reference throughput; a failure loses the job"
    cost = CostModel("restart")  # a failure loses the job: it starts over
