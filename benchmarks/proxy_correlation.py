"""Do zero-cost proxies predict trained accuracy, and how much cheaper are they than training?

Samples distinct architectures of the ``cnn`` family, without replacement and seeded, from the
grid of ``search_spaces/cnn-digits.yaml``. For each one, the network is built exactly as
training builds it (``torch.manual_seed(seed)`` then ``family.build``) and scored at
initialisation by every proxy in ``dse.accuracy.proxies`` on one minibatch of digits training
images; then the same initial weights are trained with ``dse.accuracy.train_or_load`` (the
space's own ``training:`` settings — what a cnn-digits campaign trains with — unless overridden)
and evaluated on the held-out split.

Prints one row per architecture, then the Spearman rank correlation of each proxy with trained
accuracy (a proxy's ``-inf``, its defined lowest score, ranks last; the count is printed), and of
the parameter count as a baseline: a proxy is worth computing only if it ranks better than
counting parameters. A filter line says how many of the ten best-trained
architectures survive when only the proxy's top half is trained. Cost is the median seconds of
one ``proxy_scores`` call (all proxies) against the median seconds of one training, with the
same two threads. Cached trainings (``--cache``) report the seconds their training took.

Proxies and training run on one torch thread by default (``--threads``): on a shared 2-core
machine, two OpenMP threads made these small networks' training 3 to 60 times slower than one
(every parallel region waits for whichever thread the OS has descheduled), which alone pushed
50 trainings far past ten minutes. The thread count changes the trained weights only by float
rounding (and is not part of the training cache key).

Run: ``.venv/bin/python benchmarks/proxy_correlation.py`` (``--archs N``, ``--cache DIR`` to keep
and reuse the trained weights, ``--epochs``/``--batch-size``/``--learning-rate`` to override the
space's training, ``--threads``; ``--quick``: QUICK_ARCHS architectures, one epoch).
Ends with ``BENCH proxy_spearman_<proxy> <rho>`` for each proxy and ``params``, and
``BENCH proxy_cost_ratio <median proxy seconds / median train seconds>``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SPACE = REPO / "search_spaces" / "cnn-digits.yaml"
FAMILY = "cnn"
PROXY_BATCH = 64  # images per proxy minibatch: the default training batch size
TOP = 10  # the "best architectures" the filter line follows
QUICK_ARCHS = 3
# The parameter count, and each proxy registered in dse today (dse.accuracy.proxies.PROXIES; a
# plugin's proxy prints a line of its own too).
BENCH_NAMES = ("proxy_spearman_params", "proxy_spearman_synflow", "proxy_spearman_naswot",
               "proxy_spearman_grad_norm", "proxy_cost_ratio")


def arch_grid(space_path: Path) -> list[dict[str, Any]]:
    """Every architecture of the space's grid, in a fixed order."""
    from dse.spec import RangeParam
    from dse.spec.loading import load_search_space

    model = load_search_space(space_path).model
    if model is None:
        raise ValueError(f"{space_path}: has no model to sample architectures from")
    axes: dict[str, list[Any]] = {}
    for name, param in model.arch.items():
        if isinstance(param, RangeParam):
            if not param.is_int:
                raise ValueError(f"{space_path}: {name} is a continuous range; this benchmark "
                                 f"needs a grid (integer ranges or choices)")
            axes[name] = list(range(int(param.low), int(param.high) + 1, int(param.step or 1)))
        else:
            axes[name] = list(param)
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def training_spec(space_path: Path, args: argparse.Namespace) -> Any:
    from dse.spec.loading import load_search_space

    base = load_search_space(space_path).training
    overrides = {"epochs": args.epochs, "batch_size": args.batch_size,
                 "learning_rate": args.learning_rate}
    return base.model_copy(update={"threads": args.threads, "seed": args.seed,
                                   **{k: v for k, v in overrides.items() if v is not None}})


def initial_module(arch: dict[str, Any], seed: int) -> Any:
    """The network ``train_or_load`` starts from: same seed, same private RNG stream."""
    import torch

    from dse.models import get_family

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_family(FAMILY).build(arch)


def train_seconds(trained: Any, cache_dir: Path) -> float:
    """Seconds the training took, also for weights loaded from the cache (its metadata file)."""
    if not trained.cached:
        return float(trained.train_seconds)
    return float(json.loads((cache_dir / f"{trained.key}.json").read_text())["train_seconds"])


def spearman(scores: list[float], accuracies: list[float]) -> float:
    """Spearman's rho. A proxy's ``-inf`` (its defined lowest score) ranks below every finite
    score, all ``-inf`` tied at the bottom, which is what ranking by the proxy means."""
    from scipy.stats import spearmanr

    return float(spearmanr(scores, accuracies).statistic)


def survivors(scores: list[float], accuracies: list[float], top: int) -> int:
    """How many of the ``top`` best-trained architectures are in the proxy's top half (ties in
    accuracy broken by sampling order)."""
    best = set(np.argsort(-np.asarray(accuracies), kind="stable")[:top])
    kept = set(np.argsort(-np.asarray(scores), kind="stable")[: len(scores) // 2])
    return len(best & kept)


def run(args: argparse.Namespace, cache_dir: Path) -> None:
    from dse.accuracy import load_digits_split, torch_threads, train_or_load
    from dse.accuracy.proxies import PROXIES, proxy_scores

    grid = arch_grid(SPACE)
    if not 1 <= args.archs <= len(grid):
        raise SystemExit(f"--archs must be in 1..{len(grid)} (the size of the grid), "
                         f"got {args.archs}")
    order = np.random.default_rng(args.seed).permutation(len(grid))
    archs = [grid[i] for i in order[: args.archs]]
    spec = training_spec(SPACE, args)
    split = load_digits_split(spec.seed)
    x, y = split.x_train[:PROXY_BATCH], split.y_train[:PROXY_BATCH]
    print(f"{len(archs)} of {len(grid)} architectures from {SPACE.relative_to(REPO)}; training: "
          f"{spec.epochs} epochs, batch {spec.batch_size}, lr {spec.learning_rate}, seed "
          f"{spec.seed}, {spec.threads} thread(s); proxies on {len(x)} training images")

    columns = ["params", *PROXIES]
    scores: dict[str, list[float]] = {name: [] for name in columns}
    accuracies: list[float] = []
    proxy_seconds: dict[str, list[float]] = {name: [] for name in PROXIES}
    call_seconds: list[float] = []
    trainings: list[float] = []
    print(f"{'arch (stages depth width kernel expand)':<42}{'params':>8}"
          + "".join(f"{name:>11}" for name in PROXIES) + f"{'proxy s':>9}{'train s':>9}{'acc':>7}")
    for arch in archs:
        module = initial_module(arch, spec.seed)
        scores["params"].append(float(sum(p.numel() for p in module.parameters())))
        with torch_threads(spec.threads):
            start = time.perf_counter()
            for name in PROXIES:
                # One proxy at a time, to time each; the sum is what one call for all costs.
                begin = time.perf_counter()
                scores[name].append(proxy_scores(module, x, y, names=[name], seed=spec.seed)[name])
                proxy_seconds[name].append(time.perf_counter() - begin)
            call_seconds.append(time.perf_counter() - start)
        trained = train_or_load(FAMILY, arch, spec, cache_dir)
        trainings.append(train_seconds(trained, cache_dir))
        accuracies.append(trained.fp32_accuracy)
        label = " ".join(str(arch[key]) for key in
                         ("num_stages", "depth", "width_mult", "kernel_size", "expand_ratio"))
        print(f"{label:<42}{int(scores['params'][-1]):>8}"
              + "".join(f"{scores[name][-1]:>11.3f}" for name in PROXIES)
              + f"{call_seconds[-1]:>9.3f}{trainings[-1]:>9.2f}{accuracies[-1]:>7.3f}", flush=True)

    print(f"\ntrained accuracy: min {min(accuracies):.3f}, median {statistics.median(accuracies):.3f}, "
          f"max {max(accuracies):.3f}")
    top = min(TOP, len(archs))
    for name in columns:
        lowest = sum(score == -np.inf for score in scores[name])
        print(f"{name:>10}: Spearman rho {spearman(scores[name], accuracies):+.3f}; training only "
              f"its top half keeps {survivors(scores[name], accuracies, top)} of the {top} best"
              + (f"; {lowest} architecture(s) scored -inf (ranked last, tied)" if lowest else ""))
    for name in PROXIES:
        print(f"{name:>10}: median {statistics.median(proxy_seconds[name]):.3f} s per evaluation")
    proxy_median, train_median = statistics.median(call_seconds), statistics.median(trainings)
    print(f"one proxy_scores call (all {len(PROXIES)}): median {proxy_median:.3f} s; one training: "
          f"median {train_median:.2f} s")
    for name in columns:
        print(f"BENCH proxy_spearman_{name} {spearman(scores[name], accuracies):.4f}")
    print(f"BENCH proxy_cost_ratio {proxy_median / train_median:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", type=int, default=50, help="architectures to sample")
    parser.add_argument("--seed", type=int, default=0, help="sampling, split and init seed")
    parser.add_argument("--cache", type=Path, default=None,
                        help="trained-model cache folder to keep (default: a temporary one)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for proxies and training (default 1)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ARCHS} architectures, one epoch (--archs, --epochs ignored)")
    args = parser.parse_args()
    if args.quick:
        args.archs, args.epochs = QUICK_ARCHS, 1
    if args.cache is not None:
        run(args, args.cache)
        return
    with tempfile.TemporaryDirectory() as folder:
        run(args, Path(folder))


if __name__ == "__main__":
    main()
