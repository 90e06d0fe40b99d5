"""Accuracy of candidate networks: a shipped dataset, short real training, and its cache.

Importing this package imports no torch or scikit-learn; they load when a function needs them.
"""

from dse.accuracy.agreement import fidelity_metrics, predict_batches, reference_logits
from dse.accuracy.cache import TrainedModel, initial_module, train_or_load, training_key
from dse.accuracy.digits import DigitsSplit, load_digits_split
from dse.accuracy.proxies import PROXIES, proxy_scores
from dse.accuracy.training import accuracy, torch_threads, train

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
