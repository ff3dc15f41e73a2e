"""``none``: no protection. The reference throughput; a failure loses the job."""

from mpiec.strategies.base import Strategy


class NoProtection(Strategy):
    name = "none"
    description = "no protection: reference throughput; a failure loses the job"
