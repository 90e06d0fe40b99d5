"""Trained weights and their fp32 accuracy, cached on disk per (family, arch, training settings)."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dse.accuracy.datasets import load_split
from dse.accuracy.training import accuracy, torch_threads, train
from dse.core import stable_hash
from dse.models import get_family
from dse.util import atomic_write

if TYPE_CHECKING:
    import torch

    from dse.models import ModelSource
    from dse.spec import TrainingSpec

logger = logging.getLogger(__name__)

# Bump when the training procedure or file layout changes, so old entries are not mistaken for new.
CACHE_FORMAT = 1
EVAL_BATCH = 256

# What a damaged entry can raise on load: truncated/garbled files, a JSON or pickle that does not
# parse, or weights whose names or shapes do not match the architecture.
_UNREADABLE = (OSError, EOFError, ValueError, KeyError, TypeError, RuntimeError,
               pickle.UnpicklingError)


@dataclass
class TrainedModel:
    """A trained network (eval mode) and its fp32 top-1 accuracy on the held-out split.

    ``train_seconds`` is 0.0 and ``cached`` True when the weights came from the cache. ``key`` names
    the weights (family, arch, training settings): artifacts built from them are cached under it.
    A model without a dataset is not trained: its weights are those its source builds (seeded),
    and ``fp32_accuracy`` is NaN.
    """

    module: torch.nn.Module
    fp32_accuracy: float
    train_seconds: float
    cached: bool
    key: str
    input_shape: tuple[int, ...]
    dataset: str | None = "digits"


def training_key(family_name: str, arch: Mapping[str, Any], training: TrainingSpec,
                 dataset: str | None = "digits") -> str:
    """The cache key of the weights that training ``arch`` with ``training`` produces.

    ``threads`` is left out: it changes how fast the weights are made, not what they mean, and a
    campaign on a machine with another core count should reuse them.
    """
    return stable_hash({
        "format": CACHE_FORMAT,
        "family": family_name,
        "arch": dict(arch),
        "dataset": dataset,
        "training": training.model_dump(exclude={"threads"}),
    })


_FAMILY_DATASET = "family's own"


def train_or_load(source: str | ModelSource, arch: Mapping[str, Any], training: TrainingSpec,
                  cache_dir: Path, dataset: str | None = _FAMILY_DATASET) -> TrainedModel:
    """Load the trained weights of ``arch`` from ``cache_dir``, or train them and store them.

    ``source`` is a family name or a model source (``dse.models.sources``); ``dataset`` defaults
    to a family's own, and None means no training (the source's seeded weights, no accuracy).
    Raises KeyError for an unknown family and ValueError for an invalid arch or a dataset that
    does not fit the model's input. An unreadable cache entry is logged and retrained, never fatal.
    """
    import torch

    family: ModelSource = get_family(source) if isinstance(source, str) else source
    if dataset == _FAMILY_DATASET:
        dataset = get_family(family.name).dataset
    full_arch = family.validate(arch)
    input_shape = family.input_shape_for(full_arch)
    key = training_key(family.name, full_arch, training, dataset)
    if dataset is None:
        module = initial_module(family, full_arch, training.seed).eval()
        return TrainedModel(module, float("nan"), 0.0, False, key, input_shape, None)
    weights_path, meta_path = cache_dir / f"{key}.pt", cache_dir / f"{key}.json"
    if meta_path.exists():
        loaded = _load(family, full_arch, weights_path, meta_path)
        if loaded is not None:
            module, fp32_accuracy = loaded
            return TrainedModel(module, fp32_accuracy, 0.0, True, key, input_shape, dataset)

    split = load_split(dataset, training.seed, input_shape)
    module = initial_module(family, full_arch, training.seed)
    seconds = train(module, split, training)
    with torch_threads(training.threads), torch.inference_mode():
        fp32_accuracy = accuracy(lambda x: module(torch.from_numpy(x)).numpy(),
                                 split.x_test, split.y_test, EVAL_BATCH)

    cache_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(weights_path, lambda path: torch.save(module.state_dict(), path))
    meta = {"family": family.name, "arch": full_arch, "dataset": dataset,
            "training": training.model_dump(), "fp32_accuracy": fp32_accuracy,
            "train_seconds": seconds, "weights_sha256": _sha256(weights_path)}
    # The metadata goes last: its presence marks a complete entry.
    atomic_write(meta_path, lambda path: path.write_text(json.dumps(meta, indent=1)))
    return TrainedModel(module, fp32_accuracy, seconds, False, key, input_shape, dataset)


def initial_module(source: ModelSource, arch: Mapping[str, Any], seed: int) -> torch.nn.Module:
    """The untrained module training starts from (and zero-cost proxies score): built in a
    private RNG stream seeded with ``seed``, so the same seed gives the same initial weights
    whatever ran before."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return source.build(arch)


def _load(family: ModelSource, arch: dict[str, Any], weights_path: Path,
          meta_path: Path) -> tuple[torch.nn.Module, float] | None:
    import torch

    try:
        meta = json.loads(meta_path.read_text())
        fp32_accuracy = float(meta["fp32_accuracy"])
        if not np.isfinite(fp32_accuracy) or not 0.0 <= fp32_accuracy <= 1.0:
            raise ValueError(f"fp32_accuracy {fp32_accuracy!r} is not in [0, 1]")
        # Weights that still load can still be damaged (a flipped bit in a float): the digest
        # recorded at training says whether these are the bytes that were trained.
        if meta.get("weights_sha256") != _sha256(weights_path):
            raise ValueError("the weights do not match the SHA-256 recorded at training")
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
        module = family.build(arch)
        module.load_state_dict(state)
    except _UNREADABLE as exc:
        logger.warning("trained-model cache entry %s is unreadable (%s: %s); retraining",
                       meta_path.stem, type(exc).__name__, exc)
        return None
    module.eval()
    return module, fp32_accuracy



def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
