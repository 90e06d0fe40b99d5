"""Which unmeasured candidate to measure next: the one whose optimistic prediction adds the most
hypervolume to the front found so far (all objectives minimised and scaled to about [0, 1]).

An optimistic point is the prediction less ``beta`` times its uncertainty, so a candidate the
model knows little about still gets its turn when it might be good; once the model is sure, the
candidates that would truly extend the front win. When no candidate's optimistic point extends
the front, the one closest to extending it (the smallest additive epsilon: how much it must
improve, in the objective where that is cheapest, to no longer be dominated) is taken.
"""

from __future__ import annotations

import numpy as np

from dse.util import FloatArray, exclusive_volume, nondominated

# Exact hypervolume gains are computed for at most this many candidates (those needing the
# least improvement): in 3 or more objectives each costs a slicing of the front.
MOST_GAINS = 600


def epsilon_to_front(points: FloatArray, front: FloatArray) -> FloatArray:
    """Per point, how much it must improve (in one objective, the cheapest) to escape every
    front row that covers it: max over rows of min over objectives of (point - row). Negative
    when no row covers it (it would extend the front), zero or positive when one does."""
    if not len(front):
        return np.full(len(points), -np.inf)
    gaps: FloatArray = np.max(np.min(points[:, np.newaxis, :] - front[np.newaxis, :, :], axis=2),
                              axis=1)
    return gaps


def choose(optimistic: FloatArray, front: FloatArray, reference: FloatArray,
           rng: np.random.Generator, success: FloatArray | None = None) -> int:
    """The row of ``optimistic`` to measure next (ties broken at random). ``success``: per row,
    the chance that it can be measured at all; rows below even odds are taken only when no
    other row is left, and gains are weighted by it."""
    front = nondominated(front) if len(front) else front
    epsilon = epsilon_to_front(optimistic, front)
    likely = np.ones(len(optimistic), dtype=bool) if success is None else success >= 0.5
    if not likely.any():
        likely[:] = True
    inside = np.all(optimistic < reference, axis=1) & likely
    extending = np.flatnonzero((epsilon < 0) & inside) if len(front) else np.flatnonzero(inside)
    if not len(extending):
        closest = np.where(likely, epsilon, np.inf)
        best = np.flatnonzero(closest <= closest.min() + 1e-12)
        return int(rng.choice(best))
    if len(extending) > MOST_GAINS:
        extending = extending[np.argsort(epsilon[extending], kind="stable")[:MOST_GAINS]]
    gains = np.array([exclusive_volume(optimistic[i], front, reference) for i in extending])
    if success is not None:
        gains = gains * success[extending]
    best = extending[gains >= gains.max() - 1e-12 * max(1.0, gains.max())]
    return int(rng.choice(best))
