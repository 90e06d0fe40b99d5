"""A real three-node farm (``ray.cluster_utils.Cluster``) with two CPU device profiles: every
candidate lands on a device of its profile; a node removed mid-trial has its trial re-run
elsewhere; the budget completes with no duplicate and no lost trial; and the recorded windows show
that no measurement on a node overlapped any other dse work there.

The farm runs in a child process (tests/farm/_farm_scenario.py): this pytest process is already
connected to the session's embedded Ray, and a process joins one cluster only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

import pytest

from tests.conftest import REPO

TRIALS = 6


@pytest.fixture(scope="module")
def farm_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("farm") / "farm.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.farm._farm_scenario", str(out),
                           str(TRIALS)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _measured(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in run["trials"] if t["reused_from"] is None and t["status"] == "ok"]


def test_the_budget_completes_per_profile_with_nothing_lost(farm_run: dict[str, Any]) -> None:
    trials = farm_run["trials"]
    assert {t["state"] for t in trials} <= {"COMPLETE", "FAIL"}, "a trial was left running"
    # The budget counts distinct candidates measured to an ok result (repeats reuse them).
    measured = Counter(t["study_profile"] for t in _measured(farm_run))
    assert measured == {"cpu-a": TRIALS, "cpu-b": TRIALS}
    for trial in trials:
        assert trial["status"] in ("ok", "failed", "infeasible")
        if trial["status"] != "ok":
            assert trial["reason"]


def test_no_candidate_is_measured_twice(farm_run: dict[str, Any]) -> None:
    for profile in ("cpu-a", "cpu-b"):
        ids = [t["candidate_id"] for t in _measured(farm_run) if t["study_profile"] == profile]
        assert len(ids) == len(set(ids))


def test_every_candidate_is_measured_on_a_device_of_its_profile(
        farm_run: dict[str, Any]) -> None:
    nodes = farm_run["nodes"]
    allowed = {"cpu-a": {nodes["shared"], nodes["doomed"]}, "cpu-b": {nodes["other"]}}
    for trial in _measured(farm_run):
        profile = trial["study_profile"]
        assert trial["candidate_profile"] == profile
        assert trial["provenance"]["device_profile"] == profile
        assert trial["provenance"]["node_id"] in allowed[profile]


def test_the_removed_nodes_trial_ran_again_elsewhere(farm_run: dict[str, Any]) -> None:
    assert farm_run["removed_at"] is not None, "the doomed node never measured"
    retried = [t for t in farm_run["trials"] if (t["provenance"]["attempts"] or "1") != "1"]
    assert len(retried) == 1
    trial = retried[0]
    assert trial["status"] == "ok"
    assert trial["provenance"]["node_id"] == farm_run["nodes"]["shared"]
    assert "died" in trial["provenance"]["earlier_attempts"]
    assert farm_run["quarantined"] == {}


def test_no_measurement_overlapped_other_dse_work_on_its_node(farm_run: dict[str, Any]) -> None:
    spans: dict[str, list[tuple[str, int, float, float]]] = defaultdict(list)
    for trial in farm_run["trials"]:
        p = trial["provenance"]
        if p["node_id"] is None:
            continue
        tag = (trial["study_profile"], trial["number"])
        spans[p["node_id"]].append(("build", hash(tag), float(p["build_start"]),
                                    float(p["build_end"])))
        if p["measure_start"] is not None:
            spans[p["node_id"]].append(("measure", hash(tag), float(p["measure_start"]),
                                        float(p["measure_end"])))
    shared = spans[farm_run["nodes"]["shared"]]
    # Two devices share this node, so there was other work to keep apart.
    assert sum(kind == "measure" for kind, *_ in shared) >= 4
    for node, items in spans.items():
        for kind, owner, start, end in items:
            if kind != "measure":
                continue
            for _, other, other_start, other_end in items:
                if other != owner:
                    assert end <= other_start or other_end <= start, (
                        f"on node {node[:8]} a measurement [{start:.3f}, {end:.3f}] overlapped "
                        f"other work [{other_start:.3f}, {other_end:.3f}]")
