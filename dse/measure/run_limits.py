"""The floors, caps and target a latency run is held to: checking the arguments that set them,
the run's sample floor, and the equal share of them each of its blocks gets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from dse.measure.stats import samples_for_ci


def check_latency_arguments(target_rel_ci: float, min_iters: int, max_iters: int,
                            min_seconds: float, max_seconds: float, warmup_max_iters: int,
                            warmup_max_seconds: float, warmup_tolerance: float, timer: str,
                            required_quantiles: Sequence[float], blocks: int,
                            block_gap_s: float, max_extension: float = 1.0,
                            precision: Mapping[float, float] | None = None) -> int:
    """Raise ValueError naming the first bad argument; return the run's sample floor."""
    def number(name: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return float(value)

    def count(name: str, value: object, least: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        return value

    if not 0 < number("target_rel_ci", target_rel_ci) < 1:
        raise ValueError(f"target_rel_ci must lie in (0, 1), got {target_rel_ci}")
    count("min_iters", min_iters, 1)
    count("max_iters", max_iters, min_iters)
    count("warmup_max_iters", warmup_max_iters, 0)
    if not 0 <= number("min_seconds", min_seconds) < math.inf:
        raise ValueError(f"min_seconds must be finite and >= 0, got {min_seconds}")
    if not min_seconds <= number("max_seconds", max_seconds) < math.inf or max_seconds <= 0:
        raise ValueError(f"max_seconds must be finite, > 0 and >= min_seconds ({min_seconds}), "
                         f"got {max_seconds}")
    if not 0 <= number("warmup_max_seconds", warmup_max_seconds) < math.inf:
        raise ValueError(f"warmup_max_seconds must be finite and >= 0, got {warmup_max_seconds}")
    if not 0 < number("warmup_tolerance", warmup_tolerance) < math.inf:
        raise ValueError(f"warmup_tolerance must be finite and > 0, got {warmup_tolerance}")
    if timer not in ("host", "cuda"):
        raise ValueError(f"timer must be 'host' or 'cuda', got {timer!r}")
    floor = min_iters
    for quantile in required_quantiles:
        if not 0 < number("required_quantiles", quantile) < 1:
            raise ValueError(f"required_quantiles must lie in (0, 1), got {quantile}")
        needed = samples_for_ci(quantile)
        if needed > max_iters:
            raise ValueError(f"max_iters = {max_iters} can never give the {quantile:g} quantile a "
                             f"95% confidence interval (that needs at least {needed} samples)")
        floor = max(floor, needed)
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= max_iters:
        raise ValueError(f"blocks must be an integer in [1, max_iters = {max_iters}], "
                         f"got {blocks!r}")
    if (isinstance(block_gap_s, bool) or not isinstance(block_gap_s, int | float)
            or not 0 <= block_gap_s < math.inf):
        raise ValueError(f"block_gap_s must be a finite number of seconds >= 0, got {block_gap_s!r}")
    if not 1 <= number("max_extension", max_extension) < math.inf:
        raise ValueError(f"max_extension must be finite and >= 1, got {max_extension}")
    for quantile, target in (precision or {}).items():
        if not 0 < number("precision", quantile) < 1:
            raise ValueError(f"precision's quantiles must lie in (0, 1), got {quantile}")
        if not 0 < number("precision", target) < math.inf:
            raise ValueError(f"precision's relative half-widths must be finite and > 0, got "
                             f"{target} for the {quantile:g} quantile")
    return floor


def check_seconds(name: str, value: object) -> None:
    """Raise ValueError unless ``value`` is a finite number of seconds > 0."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")


@dataclass(frozen=True)
class BlockShare:
    """One block's floors, caps and target.

    ``max_seconds`` caps the time spent on precision; ``ceiling_seconds`` (``max_seconds`` times
    the run's ``max_extension``) caps the time a block may take to reach its sample floor: on a
    slower machine the samples a percentile's interval needs take longer to come, and a run
    that gave up at ``max_seconds`` would lose the objective it was measuring.
    """

    min_iters: int
    max_iters: int
    min_seconds: float
    max_seconds: float
    ceiling_seconds: float
    target_rel_ci: float
    required_quantiles: tuple[float, ...]

    @classmethod
    def of_run(cls, *, floor: int, blocks: int, max_iters: int, min_seconds: float,
               max_seconds: float, target_rel_ci: float, required_quantiles: Sequence[float],
               max_extension: float = 1.0) -> BlockShare:
        """The first block's share of a run with sample floor ``floor`` split into ``blocks``."""
        return cls(
            # Each block must stand on its own: the pooled floors split between them.
            min_iters=max(1, math.ceil(floor / blocks)), max_iters=max_iters // blocks,
            min_seconds=min_seconds / blocks, max_seconds=max_seconds / blocks,
            ceiling_seconds=max_seconds * max_extension / blocks,
            # n samples in each of b blocks: the pooled median's CI is about 1/sqrt(b) as wide.
            target_rel_ci=min(0.99, target_rel_ci * math.sqrt(blocks)),
            required_quantiles=tuple(required_quantiles))

    def with_calls(self, calls: int) -> BlockShare:
        """This share for a block that takes exactly ``calls`` calls, within the ceiling: a later
        block runs as long as it needs to match the first, which may itself have been
        extended."""
        return replace(self, min_iters=calls, max_iters=calls, min_seconds=0.0,
                       max_seconds=self.ceiling_seconds)
