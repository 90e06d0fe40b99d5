"""The default sampler: a device's candidate space listed and drawn as the loop would ask it, no
candidate proposed twice while an unmeasured one is left, failures steered off, the front of a
recorded table found with fewer measurements than random search, and another device's study
lending its model."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

from dse.core.candidate import Candidate
from dse.search.candidate_space import CandidateSpace, params_key
from dse.search.samplers.acquisition import choose, epsilon_to_front
from dse.search.samplers.features import FeatureEncoder
from dse.search.samplers.registered import SURROGATE_STARTUP, make_sampler
from dse.search.samplers.surrogate import SamplerContext
from dse.search.space import suggest_candidate
from dse.spec import HardwareProfile, SamplerSpec, SearchSpace
from tests.benchmark_scripts import load_benchmark
from tests.conftest import LOCAL_CPU, TINY_SPACE

PROFILE = HardwareProfile.model_validate(yaml.safe_load(LOCAL_CPU))
# 3 widths x (onnxruntime: fp32 or int8, 1 or 2 threads; torch: fp32, 1 thread) x 2 batch sizes.
GRIDDED = SearchSpace.model_validate(yaml.safe_load(
    TINY_SPACE.replace("width_mult: [0.5, 1.0]", "width_mult: {low: 0.5, high: 1.0, step: 0.25}")
    .replace("intra_op_threads: [1]", "intra_op_threads: {low: 1, high: 2}")))


def _candidate_of(params: dict[str, Any], space: SearchSpace = GRIDDED) -> Candidate:
    """The candidate a trial with exactly these parameters describes (through Optuna)."""
    study = optuna.create_study()
    study.enqueue_trial(params)
    trial = study.ask()
    candidate = suggest_candidate(trial, space, PROFILE)
    assert trial.params == params  # nothing drawn beyond the listed parameters
    return candidate


def _every_valid_candidate() -> set[str]:
    arch = {"num_stages": 1, "depth": 1, "kernel_size": 3, "expand_ratio": 2}
    deployments = [("onnxruntime", p, {"intra_op_threads": t}) for p in ("fp32", "int8")
                   for t in (1, 2)] + [("torch", "fp32", {"num_threads": 1})]
    return {Candidate("cnn", {**arch, "width_mult": width}, precision, batch, backend, knobs,
                      "local-cpu").candidate_id
            for width, (backend, precision, knobs), batch in itertools.product(
                (0.5, 0.75, 1.0), deployments, (1, 4))}


def test_the_listing_holds_every_valid_candidate_once() -> None:
    listing = CandidateSpace(GRIDDED, PROFILE).listing(1000)
    assert listing is not None and len(listing) == 30
    assert len({params_key(p) for p in listing}) == 30
    assert {_candidate_of(p).candidate_id for p in listing} == _every_valid_candidate()
    assert CandidateSpace(GRIDDED, PROFILE).listing(29) is None  # over the limit: not listed
    continuous = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE.replace(
        "width_mult: [0.5, 1.0]", "width_mult: {low: 0.5, high: 1.0}")))
    assert CandidateSpace(continuous, PROFILE).listing(1000) is None


def test_draws_and_neighbours_are_valid_candidates_of_the_conditional_space() -> None:
    space = CandidateSpace(GRIDDED, PROFILE)
    rng = np.random.default_rng(0)
    valid = _every_valid_candidate()
    draws = [space.draw(rng) for _ in range(200)]
    assert {_candidate_of(p).candidate_id for p in draws} == valid  # all reached, none else
    base = draws[0]
    for _ in range(50):
        neighbour = space.neighbour(base, rng)
        assert _candidate_of(neighbour).candidate_id in valid
        changed = {k for k in base.keys() | neighbour.keys() if base.get(k) != neighbour.get(k)}
        # One parameter changed, plus the conditional ones a new backend brings or drops.
        assert len(changed - {k for k in changed if "." in k and not k.startswith("arch.")}) <= 1


def test_features_keep_numbers_ordered_and_absent_parameters_apart() -> None:
    space = CandidateSpace(GRIDDED, PROFILE)
    listing = space.listing(1000)
    assert listing is not None
    encoder = FeatureEncoder(space.distributions)
    rows = encoder.encode(listing)
    assert rows.shape[0] == 30 and np.isfinite(rows).all()
    batch = encoder.columns["batch_size"]
    assert batch.encode(1) == [0.0] and batch.encode(4) == [1.0]  # a number, on a log scale
    threads = encoder.columns["onnxruntime.intra_op_threads"]
    assert threads.encode(None) == [-1.0]  # a torch candidate has no onnxruntime threads
    backend = encoder.columns["backend"]
    assert sorted(backend.encode("torch")) == [0.0, 1.0]  # one-hot


def _tell(study: optuna.Study, trial: optuna.Trial, candidate: Candidate) -> None:
    """Deterministic stand-in results of a known shape: wider is more accurate and slower;
    int8 is faster and less accurate; torch fails to build."""
    if candidate.backend == "torch":
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    width = candidate.arch["width_mult"]
    int8 = candidate.precision == "int8"
    accuracy = 0.8 + 0.1 * width - (0.05 if int8 else 0.0)
    latency = width * (0.5 if int8 else 1.0) * candidate.batch_size / (
        1 + 0.5 * (candidate.knobs["intra_op_threads"] - 1))
    study.tell(trial, [accuracy, latency])


def _study(seed: int, space: SearchSpace = GRIDDED) -> optuna.Study:
    context = SamplerContext(CandidateSpace(space, PROFILE))
    return optuna.create_study(directions=["maximize", "minimize"], sampler=make_sampler(
        SamplerSpec(seed=seed, startup_trials=4), 0, context))


def test_the_default_is_the_surrogate_and_its_start_fills_the_space() -> None:
    from dse.search.candidate_space import params_key
    from dse.search.samplers.features import FeatureEncoder

    assert SamplerSpec().name == "surrogate"
    ours = _study(seed=5)
    # startup_trials reaches the sampler from its settings; unset, the surrogate's own start.
    assert ours.sampler.startup_trials == 4
    context = SamplerContext(CandidateSpace(GRIDDED, PROFILE))
    assert make_sampler(SamplerSpec(), 0, context).startup_trials == SURROGATE_STARTUP
    theirs = optuna.create_study(directions=["maximize", "minimize"],
                                 sampler=optuna.samplers.RandomSampler(seed=5))
    space = CandidateSpace(GRIDDED, PROFILE)
    listing = space.listing(10_000)
    assert listing is not None
    encoder = FeatureEncoder(space.distributions)
    asked: list[dict[str, object]] = []
    for step in range(4):  # the startup trials
        a = ours.ask()
        candidate = suggest_candidate(a, GRIDDED, PROFILE)
        if step == 0:  # the first as random search's
            b = theirs.ask()
            assert candidate == suggest_candidate(b, GRIDDED, PROFILE)
        else:  # each later one as far (L1 over the features) from those asked as any could be
            rest = [p for p in listing if params_key(p) not in {params_key(q) for q in asked}]

            def distance(rows: list[dict[str, object]]) -> np.ndarray:
                gaps = encoder.encode(rows)[:, None, :] - encoder.encode(asked)[None, :, :]
                return np.abs(gaps).sum(axis=2).min(axis=1)

            assert distance([dict(a.params)])[0] == pytest.approx(distance(rest).max())
        asked.append(dict(a.params))
        ours.tell(a, [0.5, 1.0])


def test_with_the_spread_start_off_the_start_is_optunas_random_sampler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dse.search.samplers.surrogate as surrogate

    monkeypatch.setattr(surrogate, "SPREAD_START", False)
    ours = _study(seed=5)
    theirs = optuna.create_study(directions=["maximize", "minimize"],
                                 sampler=optuna.samplers.RandomSampler(seed=5))
    for _ in range(4):  # the startup trials: the same candidates as random search's
        a, b = ours.ask(), theirs.ask()
        assert suggest_candidate(a, GRIDDED, PROFILE) == suggest_candidate(b, GRIDDED, PROFILE)
        ours.tell(a, [0.5, 1.0])
        theirs.tell(b, [0.5, 1.0])


def test_no_candidate_is_proposed_twice_while_one_is_unmeasured_and_failures_are_avoided(
        ) -> None:
    study = _study(seed=1)
    seen: list[str] = []
    for _ in range(30):
        trial = study.ask()
        candidate = suggest_candidate(trial, GRIDDED, PROFILE)
        seen.append(candidate.candidate_id)
        _tell(study, trial, candidate)
    after_startup = seen[4:]
    # The random start may repeat; the model never does while the space has unmeasured ones.
    assert len(set(after_startup)) == len(after_startup)
    assert set(seen) == _every_valid_candidate()
    # torch always fails: once the model has seen a failure it measures the onnxruntime
    # candidates first (the classifier's chance of success for torch is below even odds).
    trials = study.get_trials(deepcopy=False)
    first_failure = min(t.number for t in trials if t.state == optuna.trial.TrialState.FAIL)
    order = [t.params["backend"] for t in trials[max(4, first_failure + 1):]
             if params_key(t.params) not in {params_key(u.params) for u in trials[:t.number]}]
    last_ort = max(i for i, backend in enumerate(order) if backend == "onnxruntime")
    assert order[:last_ort].count("torch") <= 1, order
    assert order.count("torch") >= 4  # measured once the others ran out


def test_on_a_space_too_large_to_list_the_model_proposes_new_valid_candidates() -> None:
    # A continuous width: no listing, so each proposal scores random draws plus neighbours of
    # the front found so far (the front's members picked through dse.util.dominance).
    continuous = SearchSpace.model_validate(yaml.safe_load(TINY_SPACE.replace(
        "width_mult: [0.5, 1.0]", "width_mult: {low: 0.5, high: 1.0}")))
    study = _study(seed=4, space=continuous)
    sampler = study.sampler
    for _ in range(8):
        trial = study.ask()
        _tell(study, trial, suggest_candidate(trial, continuous, PROFILE))
    asked = {params_key(t.params) for t in study.trials}
    proposal = sampler.propose(study)  # type: ignore[attr-defined]
    assert proposal is not None and params_key(proposal) not in asked
    candidate = _candidate_of(proposal, continuous)
    assert 0.5 <= candidate.arch["width_mult"] <= 1.0 and candidate.backend == "onnxruntime"


def test_the_acquisition_takes_the_largest_gain_or_the_closest_to_the_front() -> None:
    front = np.array([[0.2, 0.8], [0.8, 0.2]])
    reference = np.array([1.1, 1.1])
    points = np.array([[0.9, 0.9],    # dominated
                       [0.5, 0.5],    # extends the front the most
                       [0.15, 0.79]])  # extends a little
    rng = np.random.default_rng(0)
    assert choose(points, front, reference, rng) == 1
    assert choose(points, front, reference, rng, success=np.array([1.0, 0.2, 1.0])) == 2
    dominated = np.array([[0.9, 0.9], [0.3, 0.85]])
    gaps = epsilon_to_front(dominated, front)
    assert math.isclose(gaps[0], 0.1) and math.isclose(gaps[1], 0.05)
    assert (epsilon_to_front(points, front)[1:] < 0).all()
    assert choose(dominated, front, reference, rng) == 1  # the nearer miss


def test_the_surrogate_finds_the_recorded_front_with_fewer_measurements_than_random() -> None:
    bench = load_benchmark("search_efficiency")
    table = bench.load_table("cnn-digits")
    seeds = range(3)
    ours = bench.summarize([bench.search_run(table, "surrogate", s) for s in seeds])
    random = bench.summarize([bench.search_run(table, "random", s) for s in seeds])
    assert ours.missed[0.99] == 0
    assert ours.median[0.99] <= 0.6 * random.median[0.99], (ours.median, random.median)

