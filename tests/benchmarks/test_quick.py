"""The runner of the benchmarks' quick modes (benchmarks/quick.py): what it counts as a benchmark,
what it requires of one's output, and that every benchmark declares its BENCH lines and has a
quick mode. It runs no benchmark: ``python benchmarks/quick.py`` does."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick() -> ModuleType:
    return load_benchmark("quick")


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body + '\n\nif __name__ == "__main__":\n    main()\n')
    return path


def test_every_benchmark_declares_its_lines_and_has_a_quick_mode(quick: ModuleType) -> None:
    benches = quick.discover()
    assert len(benches) >= 20
    for bench in benches:
        assert bench.names, bench.path.name
        assert '"--quick"' in bench.path.read_text(), f"{bench.path.name} has no --quick"
    # Every benchmark runs somewhere: on its own, or inside the one that lists it in PARTS.
    names = {b.path.name for b in benches}
    assert {name for b, _ in quick.to_run(benches) for name in (b.path.name, *b.parts)} == names


def test_a_missing_line_fails_naming_the_script_and_the_line(quick: ModuleType) -> None:
    outcome = quick.judge("x.py", ("a", "b"), 0, "BENCH a 1\n", 1.0)
    assert (outcome.script, outcome.status) == ("x.py", "FAIL")
    assert outcome.why == "no line BENCH b"


def test_a_nonzero_exit_fails_even_with_every_line(quick: ModuleType) -> None:
    outcome = quick.judge("x.py", ("a",), 1, "BENCH a 1\nTraceback ...\n", 1.0)
    assert (outcome.status, outcome.why) == ("FAIL", "exit status 1")
    assert "Traceback" in outcome.tail


def test_indented_lines_count_and_a_skip_needs_no_line(quick: ModuleType) -> None:
    assert quick.judge("x.py", ("a",), 0, "  BENCH a 1\n", 1.0).status == "ok"
    skipped = quick.judge("gpu.py", ("a",), 0, "SKIP no CUDA device\n", 1.0)
    assert (skipped.status, skipped.why) == ("skip", "no CUDA device")


def test_a_program_without_bench_names_is_an_error(quick: ModuleType, tmp_path: Path) -> None:
    _script(tmp_path, "declared.py", 'BENCH_NAMES = ("a",)\n\n\ndef main() -> None: ...')
    _script(tmp_path, "forgotten.py", "def main() -> None: ...")
    (tmp_path / "helper.py").write_text("def helps() -> None: ...\n")
    with pytest.raises(ValueError, match=r"forgotten\.py: a script with a __main__ block"):
        quick.discover(tmp_path)


def test_a_part_is_checked_inside_its_benchmark_unless_that_one_is_left_out(
        quick: ModuleType, tmp_path: Path) -> None:
    _script(tmp_path, "whole.py", 'BENCH_NAMES = ("w",)\nPARTS = (("the part", "part.py"),)\n'
            "QUICK_IN_CI = False\n\n\ndef main() -> None: ...")
    _script(tmp_path, "part.py", 'BENCH_NAMES = ("p",)\n\n\ndef main() -> None: ...')
    benches = quick.discover(tmp_path)
    assert [(b.path.name, names) for b, names in quick.to_run(benches)] == [
        ("whole.py", ("w", "p"))]
    assert [(b.path.name, names) for b, names in quick.to_run(benches, {"part.py"})] == [
        ("part.py", ("p",))]
    assert [(b.path.name, names) for b, names in quick.to_run(benches, ci=True)] == [
        ("part.py", ("p",))]


def test_benchmarks_that_run_campaigns_start_first(quick: ModuleType, tmp_path: Path) -> None:
    _script(tmp_path, "a_light.py", 'BENCH_NAMES = ("a",)\n\n\ndef main() -> None: ...')
    _script(tmp_path, "z_heavy.py", 'BENCH_NAMES = ("z",)\nQUICK_CAMPAIGNS = True\n\n\n'
            "def main() -> None: ...")
    assert [b.path.name for b, _ in quick.to_run(quick.discover(tmp_path))] == [
        "z_heavy.py", "a_light.py"]


def test_two_jobs_run_two_quick_modes_at_once(quick: ModuleType, tmp_path: Path) -> None:
    # Each script says it started, then waits for the other's word: only two at once pass.
    body = ("import sys, time\nfrom pathlib import Path\n\nBENCH_NAMES = ('{me}',)\n\n\n"
            "def main() -> None:\n"
            "    Path(r'{folder}', '{me}.started').touch()\n"
            "    deadline = time.monotonic() + 60\n"
            "    while not Path(r'{folder}', '{other}.started').exists():\n"
            "        assert time.monotonic() < deadline, 'never ran beside {other}'\n"
            "        time.sleep(0.01)\n"
            "    print('BENCH {me} 1')")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for me, other in (("one", "two"), ("two", "one")):
        _script(scripts, f"{me}.py", body.format(me=me, other=other, folder=tmp_path))
    runs = quick.to_run(quick.discover(scripts))
    outcomes = quick.run_all(runs, 2, 120.0, tmp_path / "cache")
    assert [(o.script, o.status) for o in outcomes] == [("one.py", "ok"), ("two.py", "ok")]


def test_a_part_that_is_no_benchmark_is_an_error(quick: ModuleType, tmp_path: Path) -> None:
    _script(tmp_path, "whole.py", 'BENCH_NAMES = ("w",)\nPARTS = (("gone", "gone.py"),)\n\n\n'
            "def main() -> None: ...")
    with pytest.raises(ValueError, match=r"whole\.py: gone\.py"):
        quick.discover(tmp_path)


def test_a_quick_run_is_judged_on_its_output(quick: ModuleType, tmp_path: Path) -> None:
    path = _script(tmp_path, "tiny.py", 'import sys\n\nBENCH_NAMES = ("a", "b")\n\n\n'
                   "def main() -> None:\n"
                   "    assert sys.argv[1:] == ['--quick']\n"
                   "    print('BENCH a 1')")
    [(bench, names)] = quick.to_run(quick.discover(tmp_path))
    outcome = quick.run(bench, names, 60.0, {"PATH": ""})
    assert (outcome.script, outcome.status, outcome.why) == ("tiny.py", "FAIL", "no line BENCH b")
    assert bench.path == path
