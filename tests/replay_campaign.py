"""A campaign that measures nothing real: the shipped free-parameter space on the shipped replay
device (a recorded ZDT1 table), so a `dse run` of it needs no hardware and no Ray and lasts a few
seconds. Chaos and disk-full runs kill or starve its driver (tests/results/test_disk_full.py,
benchmarks/reliability_chaos.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("search_spaces/free-params-example.yaml", "hw_profiles/replay/replay-example.yaml",
         "hw_profiles/tables/zdt1-grid.csv")


def replay_campaign(root: Path, name: str, budget: int, extra: str = "") -> Path:
    """Lay the campaign out under ``root`` as the repository does (again: only the budget
    changes) and return its experiment file; ``extra``: more lines of the experiment."""
    for part in PARTS:
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / part, root / part)
    experiment = root / "experiments" / f"{name}.yaml"
    experiment.parent.mkdir(exist_ok=True)
    experiment.write_text(f"""\
name: {name}
search_space: ../search_spaces/free-params-example.yaml
devices: [../hw_profiles/replay/replay-example.yaml]
sampler: {{name: random, seed: 0}}
budget: {{trials: {budget}}}
{extra}""")
    return experiment
