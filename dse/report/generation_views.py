"""A language-model campaign's own views of its trials, beside the objectives' scatter: time to
first token against time per output token (the two latencies a user feels), and the batch's decode
tokens per second against the quality the format kept (the co-design trade-off). Each is a Pareto
scatter over two fixed metrics, every device apart, its front flagged as the objectives' front."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from dse.report.info import ParetoScatterInfo, pareto_scatter_info
from dse.report.values import TrialProvenance
from dse.results import metric_column


class GenerationView(NamedTuple):
    """One view: its heading, its page id and the scatter."""

    heading: str
    div_id: str
    scatter: ParetoScatterInfo


# (heading, page id, the two metrics); the quality axis is the reference's share kept.
_VIEWS = (
    ("Language model: time to first token against time per output token", "dse-llm-latency",
     ("ttft_p50_ms", "tpot_p50_ms")),
    ("Language model: decode tokens/s against quality kept", "dse-llm-quality",
     ("device_decode_tokens_per_s", "quality_retained")),
)


def generation_views(trials: pd.DataFrame, objectives: Sequence[str],
                     provenance: TrialProvenance | None = None,
                     front: pd.DataFrame | None = None) -> list[GenerationView]:
    """The views of a campaign with generative trials (a measured time to first token); none for
    any other campaign."""
    column = metric_column("ttft_p50_ms")
    if column not in trials.columns or not trials[column].notna().any():
        return []
    return [GenerationView(heading, div_id,
                           pareto_scatter_info(trials, objectives, axes=axes,
                                               provenance=provenance, front=front))
            for heading, div_id, axes in _VIEWS]
