"""Where things are in an exported bundle (``dse export``), relative to its folder."""

from __future__ import annotations

MODEL_DIR = "model"
DATA_DIR = "data"
DEPLOYMENT = "deployment.yaml"
MEASUREMENTS = "measurements.json"
DEVICE_PROFILE = "device_profile.yaml"
RUN_SCRIPT = "run.py"
# The exporting device's calibrated run-to-run variation, when `dse calibrate` measured it.
RUN_TO_RUN = "run_to_run.json"
REQUIREMENTS = "requirements.txt"
README = "README.md"
# `sha256sum -c MANIFEST.sha256` checks a bundle without dse.
MANIFEST = "MANIFEST.sha256"

# The data a bundle carries (at most MAX_SAMPLES of the held-out split, or stand-in inputs):
# the inputs, their labels when the model has a dataset, the fp32 model's outputs on them, and
# the deployed model's outputs as exported, which a verification is compared against.
INPUTS = f"{DATA_DIR}/inputs.npy"
LABELS = f"{DATA_DIR}/labels.npy"
REFERENCE = f"{DATA_DIR}/reference.npy"
OUTPUTS = f"{DATA_DIR}/outputs.npy"
MAX_SAMPLES = 512

# Bumped when the layout or the meaning of a file changes; `dse verify` refuses other formats.
FORMAT = 1
