"""Short, seeded, real training of a candidate network; top-1 accuracy of any predict function."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from dse.accuracy.digits import DigitsSplit
    from dse.spec import TrainingSpec


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with torch's intra-op pool at ``threads``, then restore the previous size.

    Set explicitly because the environment cannot be trusted: Ray workers export
    ``OMP_NUM_THREADS=1``, which would silently make training single-threaded.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train(model: torch.nn.Module, split: DigitsSplit, training: TrainingSpec) -> float:
    """Train ``model`` in place on ``split``'s training images; return the wall time in seconds.

    Adam on cross-entropy with a cosine learning-rate decay to zero: the decay lets a handful of
    epochs settle instead of ending on a noisy high-rate step. Shuffling uses its own generator
    seeded with ``training.seed``, so the same initial weights give the same trained weights. The
    model is left in eval mode.
    """
    import torch

    x = torch.from_numpy(split.x_train)
    y = torch.from_numpy(split.y_train)
    n = len(x)
    steps = training.epochs * math.ceil(n / training.batch_size)
    generator = torch.Generator().manual_seed(training.seed)
    # The fused kernel updates all parameters in one call: on these small nets, where per-tensor
    # Python overhead is a large share of a step, it is 10-30% faster; same algorithm, same seed.
    optimizer = torch.optim.Adam(model.parameters(), lr=training.learning_rate, fused=True)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    loss_fn = torch.nn.CrossEntropyLoss()
    with torch_threads(training.threads):
        start = time.perf_counter()
        model.train()
        for _ in range(training.epochs):
            order = torch.randperm(n, generator=generator)
            for first in range(0, n, training.batch_size):
                index = order[first:first + training.batch_size]
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(x[index]), y[index])
                loss.backward()
                optimizer.step()
                schedule.step()
        model.eval()
        return time.perf_counter() - start


def accuracy(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, y: np.ndarray,
             batch_size: int) -> float:
    """Top-1 accuracy of ``predict`` (images -> logits) over ``x``, fed ``batch_size`` at a time.

    The last batch holds the remainder and may be smaller.
    """
    from dse.accuracy.agreement import predict_batches

    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"need as many labels as images, and some: got {len(x)=}, {len(y)=}")
    return float(np.mean(predict_batches(predict, x, batch_size).argmax(axis=1) == y))
