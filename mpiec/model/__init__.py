"""Model layer: DLRM forward/backward in numpy on a flat float32 parameter vector, metrics.

MPI-free; the runtime owns embedding storage and optimizers and calls these functions.
"""

from mpiec.model.dlrm import (
    DLRMShape,
    forward_backward,
    init_params,
    layer_views,
    n_params,
    predict,
)
from mpiec.model.metrics import accuracy, auc, logloss

__all__ = [
    "DLRMShape",
    "accuracy",
    "auc",
    "forward_backward",
    "init_params",
    "layer_views",
    "logloss",
    "n_params",
    "predict",
]
