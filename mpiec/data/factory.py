"""Which sample source a config names, and whether it can serve the config's evaluations.

Owns ``make_source`` (``data.source`` -> a ``SyntheticCriteo`` or an ``ArraySource`` over a
Criteo file held in memory) and ``check_eval_size`` (the source holds ``data.eval_samples``
held-out samples). The trainers and the launcher both ask here, so that they agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpiec.errors import DataError

if TYPE_CHECKING:
    from mpiec.config import Config


def make_source(cfg: Config) -> Any:
    """The sample source of the config: synthetic, or a Criteo file held in memory."""
    d = cfg.data
    if d.source == "synthetic":
        from mpiec.data.synthetic import SyntheticCriteo

        return SyntheticCriteo(cfg.training.seed, d.cardinalities, zipf_exponent=d.zipf_exponent,
                               multi_hot=d.multi_hot)
    from mpiec.data.criteo import load_criteo_npz, load_criteo_tsv
    from mpiec.data.source import ArraySource

    loader = load_criteo_tsv if d.source == "criteo-tsv" else load_criteo_npz
    return ArraySource(loader(d.path, d.cardinalities, cat_mapping=d.cat_mapping),
                       eval_fraction=d.eval_fraction)


def check_eval_size(cfg: Any, available: int) -> None:
    """Every rank plans evaluations for ``data.eval_samples``: the source must have them."""
    if available < cfg.data.eval_samples:
        raise DataError(f"data.eval_samples = {cfg.data.eval_samples} but {cfg.data.path or 'the source'} "
                        f"holds only {available} held-out samples (data.eval_fraction = "
                        f"{cfg.data.eval_fraction}); lower data.eval_samples")


__all__ = ["make_source", "check_eval_size"]
