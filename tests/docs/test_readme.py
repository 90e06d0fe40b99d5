"""The README is an entry, not a reference: short, the two set-up commands first, its three YAML
files the shipped ones (and valid), and every link in it and in docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

README = REPO / "README.md"
PAGES = sorted([README, *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _outside_code(text: str) -> str:
    """The text without its fenced code blocks (whose brackets are YAML, not links)."""
    return re.sub(r"^ *```.*?^ *```", "", text, flags=re.DOTALL | re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _outside_code(page.read_text(encoding="utf-8"))
    return {_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; reference goes to docs/"
    first_block = lines[lines.index("```") + 1:lines.index("```", lines.index("```") + 1)]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]


def _readme_yaml_files() -> dict[str, str]:
    """The README's YAML blocks whose first line names a shipped file (``# search_spaces/x.yaml``)."""
    blocks = re.findall(r"```yaml\n# (\S+\.yaml)\n(.*?)```", README.read_text(encoding="utf-8"),
                        flags=re.DOTALL)
    return dict(blocks)


def test_the_campaign_in_three_files_is_the_shipped_one() -> None:
    files = _readme_yaml_files()
    assert {path.split("/")[0] for path in files} == {"search_spaces", "hw_profiles", "experiments"}
    for path, text in files.items():
        assert yaml.safe_load(text) == yaml.safe_load((REPO / path).read_text()), (
            f"README.md's {path} is not the shipped file (comments aside)")


def test_the_readme_campaign_validates(tmp_path: Path) -> None:
    from dse import validate_files

    files = _readme_yaml_files()
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    experiment = next(path for path in files if path.startswith("experiments/"))
    assert validate_files([tmp_path / experiment]) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(_outside_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked offline
            continue
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no such file")
        elif anchor and found.suffix == ".md" and anchor not in _anchors(found):
            broken.append(f"{target}: no heading #{anchor} in {found.name}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_every_docs_page_is_on_the_readmes_map() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [page.name for page in (REPO / "docs").glob("*.md") if f"(docs/{page.name})" not in text]
    assert missing == [], f"docs pages the README's documentation map does not list: {missing}"
