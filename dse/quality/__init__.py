"""Accuracy of candidate networks: a shipped dataset, short real training, and its cache.

Importing this package imports no torch or scikit-learn; they load when a function needs them.
"""

from dse.quality.cache import TrainedModel, initial_module, train_or_load, training_key
from dse.quality.digits import DigitsSplit, load_digits_split
from dse.quality.fidelity import fidelity_metrics, predict_batches, reference_logits
from dse.quality.proxies import PROXIES, proxy_scores
from dse.quality.training import accuracy, torch_threads, train

__all__ = [
    "PROXIES",
    "DigitsSplit",
    "TrainedModel",
    "accuracy",
    "fidelity_metrics",
    "initial_module",
    "load_digits_split",
    "predict_batches",
    "proxy_scores",
    "reference_logits",
    "torch_threads",
    "train",
    "train_or_load",
    "training_key",
]
