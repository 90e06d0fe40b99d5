"""Accuracy of candidate networks: a shipped dataset, short real training, and its cache.

Importing this package imports no torch or scikit-learn; they load when a function needs them.
"""

from dse.accuracy.agreement import fidelity_metrics, non_finite, predict_batches, reference_logits
from dse.accuracy.cache import TrainedModel, initial_module, train_or_load, training_key
from dse.accuracy.datasets import load_split, synthetic_inputs
from dse.accuracy.digits import DigitsSplit, load_digits_split
from dse.accuracy.language import heldout_ids, language_quality, prompt_ids
from dse.accuracy.proxies import PROXIES, proxy_scores
from dse.accuracy.sequences import DEFAULT_NUM_CLASSES, FEATURES
from dse.accuracy.training import accuracy, torch_threads, train
from dse.accuracy.user_evaluator import DeployedModel, run_user_evaluator

__all__ = [
    "DEFAULT_NUM_CLASSES",
    "FEATURES",
    "PROXIES",
    "DeployedModel",
    "DigitsSplit",
    "TrainedModel",
    "accuracy",
    "fidelity_metrics",
    "heldout_ids",
    "initial_module",
    "language_quality",
    "load_digits_split",
    "load_split",
    "non_finite",
    "predict_batches",
    "prompt_ids",
    "proxy_scores",
    "reference_logits",
    "run_user_evaluator",
    "synthetic_inputs",
    "torch_threads",
    "train",
    "train_or_load",
    "training_key",
]
