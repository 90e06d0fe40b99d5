"""A language model as ONNX Runtime GenAI's model folder: the loaded weights written as a Hugging
Face folder (with a tokenizer), then ONNX Runtime GenAI's own model builder run on it, in a
process of its own, once per weights, format and builder version (the folder is cached).

The builder (``python -m onnxruntime_genai.models.builder``) writes ``model.onnx`` (its weights
beside it), ``genai_config.json`` and the tokenizer's files. A config model has no tokenizer: a
word-level one over its vocabulary (token ``<i>`` is id ``i``) is written for it, which the builder
only copies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dse.core import BuildError, stable_hash
from dse.models import save_hf_folder

if TYPE_CHECKING:
    from dse.models import LanguageModel

#: The builder's precision for each ``weights`` knob value (CPU: fp32 activations throughout).
BUILDER_PRECISION = {"same": "fp32", "int8": "int8", "int4": "int4"}
#: Seconds the builder may take (SmolLM2-135M: about a minute here).
BUILD_TIMEOUT_S = 1800
# Bump when what is handed to the builder changes, so older cached folders are not reused.
_VERSION = 1


def genai_folder(model: LanguageModel, weights: str, group: int, cache_dir: Path) -> Path:
    """The model builder's folder for ``model`` with its weights as ``weights`` (int4 in groups
    of ``group``), built now or found in ``cache_dir``. BuildError with the builder's last
    error line when it fails."""
    import onnxruntime_genai as og

    key = stable_hash({"weights_key": model.key, "weights": weights,
                       "group": group if weights == "int4" else None,
                       "onnxruntime_genai": og.__version__, "version": _VERSION})
    folder = cache_dir / "onnxruntime_genai" / key
    if (folder / "genai_config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dse-genai-", dir=folder.parent) as work:
        source, built = Path(work) / "hf", Path(work) / "built"
        save_hf_folder(model, source)
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
                   "-o", str(built), "-p", BUILDER_PRECISION[weights], "-e", "cpu",
                   "-c", str(Path(work) / "cache")]
        if weights == "int4":
            command += ["--extra_options", f"int4_block_size={group}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  timeout=BUILD_TIMEOUT_S,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
        except subprocess.TimeoutExpired as exc:
            raise BuildError(f"ONNX Runtime GenAI's model builder took over "
                             f"{BUILD_TIMEOUT_S} s") from exc
        if done.returncode != 0 or not (built / "genai_config.json").is_file():
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise BuildError(f"ONNX Runtime GenAI's model builder failed ({weights} weights): "
                             f"{lines[-1].strip() if lines else f'exit {done.returncode}'}")
        # Renamed into place whole: a folder with a config is always a finished build (another
        # worker may have finished the same one meanwhile: its folder stands).
        if folder.exists():
            shutil.rmtree(built)
        else:
            os.replace(built, folder)
    return folder
