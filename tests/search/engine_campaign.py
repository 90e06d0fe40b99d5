"""A campaign of several engines on one small trained CNN, written into a folder: the experiment,
its search space and a local CPU profile that carries the engines. The engine campaigns of
test_compilers_campaign and test_edge_campaign share it; campaigns written into one folder share
one cache (trained weights, artifacts, the device folder), as runs of one experiment do."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# A loose precision, a disturbed window flagged rather than measured again (and still on the
# front) and no second looks: these campaigns are about engines and models, not the precision
# gate or the interference policy (and a second look, when the shared machine happened to disturb
# a trial, would add a trial to their tables).
MEASURE = ("{warmup_max_seconds: 0.05, min_iters: 5, min_seconds: 0.0, max_seconds: 0.1, "
           "precision: {p50: 50, p99: 50}, interference: {action: flag}, second_looks: 0, "
           "non_ok_on_front: true}")


def write_engine_campaign(root: Path, name: str, engines: Mapping[str, str],
                          extra_knobs: Mapping[str, str] | None = None) -> Path:
    """The experiment file of a grid campaign over ``engines`` (engine -> its thread knob, set to
    1), fp32 at batch 4, one trial per engine; ``extra_knobs`` adds YAML knob lines per engine."""
    for folder in ("search_spaces", "hw_profiles", "experiments"):
        (root / folder).mkdir(exist_ok=True)
    (root / "hw_profiles" / "cpu.yaml").write_text(
        f"name: local-cpu\nkind: cpu\nbackends: [{', '.join(engines)}]\nprecisions: [fp32]\n"
        "max_threads: 1\ntelemetry: [process_memory]\n")
    extra = extra_knobs or {}
    backends = "".join(f"    {engine}:\n      knobs:\n        {knob}: [1]\n{extra.get(engine, '')}"
                       for engine, knob in engines.items())
    (root / "search_spaces" / f"{name}.yaml").write_text(f"""\
name: {name}
model:
  family: cnn
  dataset: digits
  arch: {{num_stages: [1], depth: [1], width_mult: [0.5], kernel_size: [3], expand_ratio: [2]}}
training: {{epochs: 2, batch_size: 128, threads: 1}}
deployment:
  backends:
{backends}  precisions: [fp32]
  batch_sizes: [4]
objectives:
  - metric: accuracy
  - metric: latency_p50_ms
""")
    experiment = root / "experiments" / f"{name}.yaml"
    experiment.write_text(f"""\
name: {name}
cache_dir: ../cache
search_space: ../search_spaces/{name}.yaml
devices: [../hw_profiles/cpu.yaml]
sampler: {{name: grid}}
budget: {{trials: {len(engines)}}}
measurement: {MEASURE}
""")
    return experiment
