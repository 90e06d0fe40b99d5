"""What a line about a name that is not allowed says after it: "did you mean ..." for a near miss
(a misspelt metric, key, backend, knob, precision or sampler), else the allowed names — cut short
when there are many, saying where the full list is.

Every spec check that refuses a name takes its hint from :func:`allowed_hint`, so they all read
alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import get_close_matches

# Lists up to this long are shown whole when nothing is close (every key of the largest model);
# a longer one (the 50-odd metrics) is cut to this many names.
SHORT_LIST = 20
# A name longer than this is close to none of the allowed ones (the longest, a metric, has 22
# characters), and matching a huge one would cost time the check must not spend.
_LONGEST_MATCHED = 64
# difflib's similarity cutoff: 'latency_p99' is close to 'latency_p99_ms', 'trch' to 'torch', 'fp61'
# to 'fp16'; 'coreml' to nothing. A name of up to 4 letters needs more: one letter in three
# differing leaves 'gpu' close to 'cpu', which is not what a user writing 'gpu' meant.
_CUTOFF = 0.6
_SHORT_NAME, _SHORT_CUTOFF = 4, 0.75


def close_names(name: object, allowed: Iterable[str], most: int = 3) -> list[str]:
    """The allowed names nearest ``name`` (letter case ignored), best first; empty when none is
    close or ``name`` is no short string."""
    if not isinstance(name, str) or len(name) > _LONGEST_MATCHED:
        return []
    by_lower: dict[str, str] = {}
    for option in allowed:
        by_lower.setdefault(option.lower(), option)
    if name.lower() in by_lower:  # only the letter case is wrong
        return [by_lower[name.lower()]] if by_lower[name.lower()] != name else []
    cutoff = _SHORT_CUTOFF if len(name) <= _SHORT_NAME else _CUTOFF
    return [by_lower[match] for match in get_close_matches(name.lower(), list(by_lower),
                                                          n=most, cutoff=cutoff)]


def did_you_mean(names: list[str]) -> str:
    """``did you mean 'a'?``, ``did you mean 'a' or 'b'?``, ``did you mean 'a', 'b' or 'c'?``"""
    quoted = [repr(name) for name in names]
    options = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f"did you mean {options}?"


def allowed_hint(name: object, allowed: Iterable[str], *, full_list: str = "") -> str:
    """``did you mean 'x'?`` when allowed names are close to ``name``; else ``allowed: a, b, c``,
    the first :data:`SHORT_LIST` of a longer list followed by how many more there are and
    ``full_list`` (where to read them all, e.g. 'dse list metrics')."""
    options = list(dict.fromkeys(allowed))
    close = close_names(name, options)
    if close:
        return did_you_mean(close)
    shown = ", ".join(options[:SHORT_LIST])
    more = len(options) - SHORT_LIST
    if more <= 0:
        return f"allowed: {shown}"
    where = f"; all of them: {full_list}" if full_list else ""
    return f"allowed: {shown}, ... ({more} more{where})"
