"""Small utilities any layer may use: atomic writes, counters, dominance and order statistics,
host facts, the user's cache folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dse.util.faces import lazy_names as lazy_names

if TYPE_CHECKING:
    from dse.util.atomic import atomic_write as atomic_write
    from dse.util.atomic import atomic_write_text as atomic_write_text
    from dse.util.counters import counter_step as counter_step
    from dse.util.dominance import FloatArray as FloatArray
    from dse.util.dominance import Overrides as Overrides
    from dse.util.dominance import dominates as dominates
    from dse.util.dominance import exclusive_volume as exclusive_volume
    from dse.util.dominance import insert_nondominated as insert_nondominated
    from dse.util.dominance import nondominated as nondominated
    from dse.util.dominance import undominated as undominated
    from dse.util.dominance import volume as volume
    from dse.util.host_facts import cuda_provenance as cuda_provenance
    from dse.util.host_facts import l4t_release as l4t_release
    from dse.util.host_facts import read_text as read_text
    from dse.util.order_statistics import CONFIDENCE as CONFIDENCE
    from dse.util.order_statistics import PERCENTILES as PERCENTILES
    from dse.util.order_statistics import percentile_quantile as percentile_quantile
    from dse.util.order_statistics import quantile_ci_ranks as quantile_ci_ranks
    from dse.util.order_statistics import samples_for_ci as samples_for_ci
    from dse.util.order_statistics import student_t_quantile as student_t_quantile
    from dse.util.user_cache import user_cache_root as user_cache_root

# Each name loads its module on first use (see dse.util.faces).
_NAMES = {
    "CONFIDENCE": "dse.util.order_statistics",
    "FloatArray": "dse.util.dominance",
    "Overrides": "dse.util.dominance",
    "PERCENTILES": "dse.util.order_statistics",
    "atomic_write": "dse.util.atomic",
    "atomic_write_text": "dse.util.atomic",
    "counter_step": "dse.util.counters",
    "cuda_provenance": "dse.util.host_facts",
    "dominates": "dse.util.dominance",
    "exclusive_volume": "dse.util.dominance",
    "insert_nondominated": "dse.util.dominance",
    "l4t_release": "dse.util.host_facts",
    "nondominated": "dse.util.dominance",
    "percentile_quantile": "dse.util.order_statistics",
    "quantile_ci_ranks": "dse.util.order_statistics",
    "read_text": "dse.util.host_facts",
    "samples_for_ci": "dse.util.order_statistics",
    "student_t_quantile": "dse.util.order_statistics",
    "undominated": "dse.util.dominance",
    "user_cache_root": "dse.util.user_cache",
    "volume": "dse.util.dominance",
}
__all__ = sorted([*_NAMES, "lazy_names"])
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
