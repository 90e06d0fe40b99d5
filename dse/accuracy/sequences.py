"""A synthetic sequence-classification task, generated from a seed: the ``transformer`` family's data.

The task, "selected majority": every position holds a noisy vote for one of ``num_classes``
classes and has one of two colours; one position, the *selector*, holds no vote but names a
colour. The label is the class that the votes of the selected colour favour; the votes of the
other colour favour a different class, the distractor.

Why this task:

- It needs sequence mixing. No single position determines the label, and pooling per-position
  features is not enough either: the pooled counts of each (class, colour) pair say nothing of
  which colour was selected, and the selector, at a random position, must be combined with each
  vote before a nonlinearity. A model that ignores the selector can only guess between the
  favoured class and the distractor, about 50%.
- It is graded. Votes are noisy (a vote shows the favoured class only with probability
  :data:`VOTE_BIAS`, else a uniform class; its prototype carries Gaussian noise), so accuracy
  rises with how well the network counts. With the project's short training, deeper and wider
  encoders score clearly higher, and longer sequences carry more votes (more evidence) but hide
  the selector among more positions: seq_len is a real trade-off, not a free choice.

Features of a position (:data:`FEATURES` of them; any number >= ``num_classes + 2`` works):
``[0]`` is the selector flag (:data:`SIGNAL` on the selector, else 0); ``[1]`` is the colour,
``+SIGNAL`` or ``-SIGNAL`` (on the selector: the selected colour); ``[2:]`` is the vote: the
prototype of its class plus noise (on the selector: noise alone). Prototypes are distinct signed
axes of length :data:`PROTOTYPE_NORM`, so every seed poses an equally hard task.

Every number comes from ``numpy.random.default_rng(seed)``: the same arguments give byte-identical
arrays (with one numpy version, on any machine: no linear algebra, only draws, indexing and
elementwise arithmetic). The
test split is drawn from its own child stream, so it does not change with ``n_train``.
"""

from __future__ import annotations

import numbers

import numpy as np

from dse.accuracy.digits import DigitsSplit
from dse.models import FEATURES, NUM_CLASSES

__all__ = [
    "DEFAULT_NUM_CLASSES",
    "DEFAULT_N_TEST",
    "DEFAULT_N_TRAIN",
    "DEFAULT_SEQ_LEN",
    "FEATURES",
    "load_sequence_split",
]

DEFAULT_SEQ_LEN = 16
DEFAULT_N_TRAIN = 2048
DEFAULT_N_TEST = 1024
DEFAULT_NUM_CLASSES = NUM_CLASSES

# The difficulty, tuned so that the default encoder reaches about 85% in 10 epochs at seq_len 16
# while a one-layer one stays near 55% (see tests/accuracy/test_sequences.py).
VOTE_BIAS = 0.5
"""Probability that a vote shows its colour's favoured class rather than a uniform one."""
VOTE_NOISE = 0.7
"""Standard deviation of the Gaussian noise added to each vote feature."""
PROTOTYPE_NORM = 2.5
SIGNAL = 3.0
"""Magnitude of the flag and colour features: strong enough to find among the noisy votes."""

_CONTROL = 2  # features before the vote: selector flag, colour


def load_sequence_split(seed: int, seq_len: int, features: int, *,
                        n_train: int = DEFAULT_N_TRAIN, n_test: int = DEFAULT_N_TEST,
                        num_classes: int = DEFAULT_NUM_CLASSES) -> DigitsSplit:
    """A train/test split of the selected-majority task: x float32 (N, seq_len, features),
    y int64 in ``0..num_classes-1``, every class equally often (up to N % num_classes).

    Raises ValueError naming each bad argument and what is allowed.
    """
    _check(seed, seq_len, features, n_train, n_test, num_classes)
    rng = np.random.default_rng(seed)
    prototypes = _prototypes(rng, features - _CONTROL, num_classes)
    train_rng, test_rng = rng.spawn(2)
    x_train, y_train = _sample(train_rng, prototypes, n_train, seq_len)
    x_test, y_test = _sample(test_rng, prototypes, n_test, seq_len)
    return DigitsSplit(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def _check(seed: int, seq_len: int, features: int, n_train: int, n_test: int,
           num_classes: int) -> None:
    def is_int(value: object) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    problems = []
    if not (is_int(seed) and seed >= 0):
        problems.append(f"seed must be an integer >= 0, got {seed!r}")
    if not (is_int(seq_len) and seq_len >= 2):
        problems.append(f"seq_len must be an integer >= 2 (a selector and a vote), got {seq_len!r}")
    if not (is_int(num_classes) and num_classes >= 2):
        problems.append(f"num_classes must be an integer >= 2, got {num_classes!r}")
    elif not (is_int(features) and features >= num_classes + _CONTROL):
        problems.append(f"features must be an integer >= num_classes + {_CONTROL} = "
                        f"{num_classes + _CONTROL} (flag, colour, one axis per class), "
                        f"got {features!r}")
    for name, value in (("n_train", n_train), ("n_test", n_test)):
        if not (is_int(value) and value >= 1):
            problems.append(f"{name} must be an integer >= 1, got {value!r}")
    if problems:
        raise ValueError("sequences: " + "; ".join(problems))


def _prototypes(rng: np.random.Generator, dims: int, num_classes: int) -> np.ndarray:
    """One vote vector per class: distinct axes, random signs, all equally far apart."""
    axes = rng.permutation(dims)[:num_classes]
    signs = rng.choice(np.array([-1.0, 1.0]), size=num_classes)
    prototypes = np.zeros((num_classes, dims))
    prototypes[np.arange(num_classes), axes] = signs * PROTOTYPE_NORM
    return prototypes


def _sample(rng: np.random.Generator, prototypes: np.ndarray, n: int,
            seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    num_classes, dims = prototypes.shape
    rows = np.arange(n)
    labels = rng.permutation(rows % num_classes)
    # A different class for the other colour: the answer when the selector is ignored.
    distractors = (labels + rng.integers(1, num_classes, n)) % num_classes
    selected = rng.integers(0, 2, n)
    colours = rng.integers(0, 2, (n, seq_len))
    favoured = np.where(colours == selected[:, None], labels[:, None], distractors[:, None])
    votes = np.where(rng.random((n, seq_len)) < VOTE_BIAS, favoured,
                     rng.integers(0, num_classes, (n, seq_len)))
    x = np.zeros((n, seq_len, _CONTROL + dims))
    x[:, :, 1] = SIGNAL * (2 * colours - 1)
    x[:, :, _CONTROL:] = prototypes[votes] + VOTE_NOISE * rng.standard_normal((n, seq_len, dims))
    # The selector replaces one position's vote with noise alone, and names the colour.
    selector = rng.integers(0, seq_len, n)
    x[rows, selector, 0] = SIGNAL
    x[rows, selector, 1] = SIGNAL * (2 * selected - 1)
    x[rows, selector, _CONTROL:] = VOTE_NOISE * rng.standard_normal((n, dims))
    return x.astype(np.float32), labels.astype(np.int64)
