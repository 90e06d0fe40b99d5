"""Hostile spec files, beyond the mutations of malformed.py: files that cost without bound when read
naively, and a runner that feeds files to a real `dse validate` process and measures it.

``hostile_cases`` builds, in a folder that ``malformed.prepare_folder`` laid out, YAML alias bombs
(billion laughs in typed fields, quadratic blow-ups, long texts repeated, aliases inside their own
value, alias chains nesting too deep), huge scalars (integers past Python's 4,300-digit limit, long
floats, texts, keys, tags, anchors), oversize files, special files (a FIFO, ``/dev/zero``, a
directory, a socket, named directly or from an experiment) and experiments whose output folders are
files or devices. Each case says which strings dse's answer must contain. ``run_validate`` runs
``python -m dse.cli validate`` on files in a child process, under a timeout and an address-space
limit, and reports its exit code, output, wall time and peak RSS. Used by
tests/spec/test_bounded_parsing.py and benchmarks/reliability_fuzz.py.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.spec.malformed import KIND_DIRS, REPO

# How a case makes its file, given the path it should have: it writes YAML there, makes a FIFO or
# a socket there, or returns a path that exists already (/dev/zero).
Maker = Callable[[Path], Path]

# A validate process is refused more address space than this: with the limits in place it needs
# about 200 MB; without them an alias bomb would take the machine's memory.
CHILD_ADDRESS_SPACE = 2 << 30


@dataclass(frozen=True)
class HostileCase:
    name: str
    """Unique; the stem of the file the case writes."""
    family: str
    """alias_bomb, huge_scalar, oversize, special_file or output_folder."""
    kind: str
    make: Maker
    expect: tuple[str, ...] = ()
    """Strings dse's answer must contain besides the file's path (the field, the limit)."""

    def file(self, folder: Path) -> Path:
        return folder / KIND_DIRS[self.kind] / f"{self.name}.yaml"


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int
    output: str
    seconds: float
    max_rss_mb: float
    timed_out: bool

    @property
    def traceback(self) -> bool:
        return self.timed_out or "Traceback" in self.output


def _text(content: str) -> Maker:
    def make(path: Path) -> Path:
        path.write_text(content, encoding="utf-8")
        return path
    return make


def _bytes_of(size: int, head: str = "name: x\n") -> Maker:
    """A file of ``size`` bytes: a valid head, then one long comment."""
    def make(path: Path) -> Path:
        with path.open("wb") as out:
            out.write(head.encode())
            out.write(b"#" * max(0, size - len(head)))
        return path
    return make


def _existing(target: str) -> Maker:
    return lambda _path: Path(target)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_socket(path: Path) -> Path:
    """A Unix socket file at ``path``. Bound under a short name, then moved: a socket's name may
    have only about 100 bytes, fewer than a test's temporary folder can take."""
    short = Path(tempfile.mkdtemp(prefix="dse-"))
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(short / "s"))  # the socket file stays after close
    os.replace(short / "s", path)
    short.rmdir()
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _symlink_to(target: str) -> Maker:
    def make(path: Path) -> Path:
        path.symlink_to(target)
        return path
    return make


# --- YAML that describes much more than it spells ---------------------------------------------------

def laughs(levels: int, width: int = 10, where: str = "name", inside: bool = True) -> str:
    """Billion laughs: anchors ``l0`` .. ``l<levels>``, each ``width`` aliases of the one before.
    ``inside``: all of them in a list at ``where`` (a dotted field path); else defined under
    ``x-laughs`` and only the last used at ``where``."""
    anchors = [f"&l0 [{', '.join(['lol'] * width)}]"]
    anchors += [f"&l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    if inside:
        return _nested(where, f"[{', '.join(anchors)}]") + "\n"
    return f"x-laughs: [{', '.join(anchors)}]\n" + _nested(where, f"*l{levels}") + "\n"


def _nested(where: str, value: str) -> str:
    """``a.b`` and ``v`` -> ``a:\\n  b: v``."""
    keys = where.split(".")
    return "\n".join(f"{'  ' * depth}{key}:" for depth, key in enumerate(keys[:-1])) + (
        "\n" if len(keys) > 1 else "") + f"{'  ' * (len(keys) - 1)}{keys[-1]}: {value}"


def _quadratic(count: int) -> str:
    """One list of ``count`` values, used ``count`` times: count^2 values from 2 * count."""
    return (f"x-base: &b [{', '.join(['1'] * count)}]\n"
            f"name: [{', '.join(['*b'] * count)}]\n")


def _repeated_text(chars: int, uses: int) -> str:
    return f"x-text: &t {'x' * chars}\ndescription: [{', '.join(['*t'] * uses)}]\nname: x\n"


def _alias_chain(links: int, depth: int = 20) -> str:
    """Each anchor nests the one before ``depth`` levels deeper: shallow as written, deep expanded."""
    lines = [f"x-d0: &d0 {'[' * depth}1{']' * depth}"]
    for link in range(1, links + 1):
        lines.append(f"x-d{link}: &d{link} {'[' * depth}*d{link - 1}{']' * depth}")
    return "\n".join(lines) + f"\nname: *d{links}\n"


def _merge_bomb(levels: int) -> str:
    lines = ["x-m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10}"]
    for level in range(1, levels + 1):
        keys = ", ".join(f"k{n}: *m{level - 1}" for n in range(10))
        lines.append(f"x-m{level}: &m{level} {{<<: *m{level - 1}, {keys}}}")
    return "\n".join(lines) + f"\nmodel: *m{levels}\n"


def _alias_bombs() -> list[HostileCase]:
    cases = []
    # Where a bomb lands: a typed field of each kind (str, int, list, mapping).
    targets = [("search_space", "name"), ("search_space", "objectives"),
               ("search_space", "training.epochs"), ("search_space", "model.arch.depth"),
               ("hw_profile", "backends"), ("hw_profile", "name"),
               ("experiment", "budget.trials"), ("experiment", "description")]
    for kind, where in targets:
        for levels in (4, 9):
            cases.append(HostileCase(f"bomb-{kind}-{where}-{levels}", "alias_bomb", kind,
                                     _text(laughs(levels, where=where)),
                                     (where.split(".")[0], "values")))
        cases.append(HostileCase(f"bomb-used-{kind}-{where}", "alias_bomb", kind,
                                 _text(laughs(9, where=where, inside=False)), ("values",)))
    cases.append(HostileCase("bomb-wide", "alias_bomb", "search_space",
                             _text(laughs(3, width=200)), ("name", "values")))
    for count in (150, 3000):
        cases.append(HostileCase(f"bomb-quadratic-{count}", "alias_bomb", "search_space",
                                 _text(_quadratic(count)), ("values",)))
    cases.append(HostileCase("bomb-text", "alias_bomb", "search_space",
                             _text(_repeated_text(9_000, 200)), ("description", "characters")))
    cases.append(HostileCase("bomb-self-list", "alias_bomb", "search_space",
                             _text("name: &a [1, *a]\n"), ("name", "alias inside")))
    cases.append(HostileCase("bomb-self-map", "alias_bomb", "hw_profile",
                             _text("name: x\nbackends: &m {a: *m}\n"), ("backends",)))
    for links in (2, 50):
        cases.append(HostileCase(f"bomb-chain-{links}", "alias_bomb", "search_space",
                                 _text(_alias_chain(links)), ("nested too deeply",)))
    for levels in (3, 8):
        cases.append(HostileCase(f"bomb-merge-{levels}", "alias_bomb", "search_space",
                                 _text(_merge_bomb(levels)), ("values",)))
    return cases


def _huge_scalars() -> list[HostileCase]:
    digits = [("int-4301", "1" * 4301), ("int-5000", "9" * 5000), ("int-neg", "-" + "7" * 20_000),
              ("int-900k", "1" * 900_000), ("int-hex", "0x" + "f" * 5000),
              ("int-underscore", "1_000" * 1000), ("float", "1." + "5" * 5000),
              ("float-exp", "1" * 200 + ".0e+5"), ("sexagesimal", ":".join(["59"] * 200))]
    cases = []
    for label, value in digits:
        for kind, where in [("search_space", "training.epochs"), ("experiment", "budget.trials"),
                            ("hw_profile", "peak_gflops")]:
            cases.append(HostileCase(f"huge-{label}-{kind}", "huge_scalar", kind,
                                     _text(f"name: x\n{_nested(where, value)}\n"),
                                     (where.split(".")[-1], "number of")))
    for chars in (10_001, 200_000, 1_000_000):
        cases.append(HostileCase(f"huge-text-{chars}", "huge_scalar", "search_space",
                                 _text(f"name: {'x' * chars}\n"), ("name", "text of")))
    cases += [
        HostileCase("huge-key", "huge_scalar", "hw_profile",
                    _text(f"name: x\n? {'k' * 50_000}\n: 1\n"), ("text of",)),
        HostileCase("huge-unknown-key", "huge_scalar", "hw_profile",
                    _text(f"name: x\nkind: cpu\n? {'k' * 9_000}\n: 1\n"), ("unknown key",)),
        HostileCase("huge-quoted-int", "huge_scalar", "search_space",
                    _text(f"name: x\ntraining: {{epochs: '{'1' * 9_000}'}}\n"), ("epochs",)),
        HostileCase("huge-tag", "huge_scalar", "search_space",
                    _text(f"name: !{'t' * 100_000} x\n"), ("invalid YAML",)),
        HostileCase("huge-anchor", "huge_scalar", "search_space",
                    _text(f"name: *{'a' * 100_000}\n"), ("invalid YAML",)),
        HostileCase("huge-many-errors", "huge_scalar", "hw_profile",
                    _text("name: x\nkind: cpu\nbackends: [" + ", ".join(["1"] * 5000) + "]\n"),
                    ("more problems not shown",)),
    ]
    return cases


def _oversize() -> list[HostileCase]:
    cases = [HostileCase(f"oversize-{size}", "oversize", "search_space", _bytes_of(size),
                         ("bytes",)) for size in ((1 << 20) + 1, 2_000_000, 50_000_000)]
    cases.append(HostileCase("oversize-flow-list", "oversize", "search_space",
                             _text("name: [" + "1," * 400_000 + "1]\n"), ("values",)))
    cases.append(HostileCase("oversize-block-list", "oversize", "hw_profile",
                             _text("name: x\nbackends:\n" + "- 1\n" * 200_000), ("values",)))
    cases.append(HostileCase("oversize-mapping", "oversize", "hw_profile",
                             _text("".join(f"k{n}: {n}\n" for n in range(30_000))),
                             ("values",)))
    cases.append(HostileCase("oversize-deep", "oversize", "search_space",
                             _text("name: x\nmodel: " + "[" * 200_000 + "]" * 200_000 + "\n"),
                             ("model", "nested too deeply")))
    return cases


def _special_files() -> list[HostileCase]:
    made: list[tuple[str, Maker]] = [("fifo", _fifo), ("socket", make_socket),
                                     ("directory", _directory), ("dev-zero", _existing("/dev/zero")),
                                     ("dev-null", _existing("/dev/null")),
                                     ("link-dev-zero", _symlink_to("/dev/zero"))]
    cases = [HostileCase(f"special-{label}-{kind}", "special_file", kind, make, ("allowed",))
             for label, make in made for kind in ("search_space", "hw_profile", "experiment")]
    quickstart = (REPO / "experiments" / "quickstart.yaml").read_text(encoding="utf-8")
    for label, make in made:
        for key in ("search_space", "devices"):
            cases.append(HostileCase(f"special-ref-{label}-{key}", "special_file", "experiment",
                                     _referencing(quickstart, key, make), (key,)))
    return cases


def _referencing(quickstart: str, key: str, make: Maker) -> Maker:
    """The quickstart experiment with its ``search_space`` (or its only device) replaced by the
    special file ``make`` creates next to it."""
    def write(path: Path) -> Path:
        target = make(path.with_name(path.stem + ".target"))
        old = {"search_space": "../search_spaces/cnn-digits.yaml",
               "devices": "../hw_profiles/local-cpu.yaml"}[key]
        path.write_text(quickstart.replace(old, str(target)), encoding="utf-8")
        return path
    return write


def _output_folders() -> list[HostileCase]:
    quickstart = (REPO / "experiments" / "quickstart.yaml").read_text(encoding="utf-8")
    cases = []
    for field_name in ("runs_dir", "dashboards_dir", "cache_dir"):
        for label, value in [("dev-null", "/dev/null"), ("under-dev-zero", "/dev/zero/sub"),
                             ("a-file", "{file}"), ("under-a-file", "{file}/sub/folder"),
                             ("under-a-fifo", "{fifo}/sub")]:
            cases.append(HostileCase(f"folder-{field_name}-{label}", "output_folder",
                                     "experiment", _with_folder(quickstart, field_name, value),
                                     (field_name, "allowed: a folder")))
    return cases


def _with_folder(quickstart: str, field_name: str, value: str) -> Maker:
    def write(path: Path) -> Path:
        blocker = path.with_name(path.stem + ".blocker")
        blocker.write_text("not a folder\n")
        fifo = path.with_name(path.stem + ".fifo")
        os.mkfifo(fifo)
        folder = value.format(file=blocker, fifo=fifo)
        path.write_text(f"{quickstart}{field_name}: {folder}\n", encoding="utf-8")
        return path
    return write


def hostile_cases() -> list[HostileCase]:
    """Every hostile case, in a fixed order."""
    return [*_alias_bombs(), *_huge_scalars(), *_oversize(), *_special_files(), *_output_folders()]


# --- a real `dse validate` process ------------------------------------------------------------------

def run_validate(files: Sequence[Path], timeout_s: float = 60.0) -> ProcessResult:
    """``python -m dse.cli validate FILES`` in a child process, killed after ``timeout_s``.

    The wall time runs from the start of the child to its exit, interpreter start included. The
    peak RSS is the child's own, from ``os.wait4`` (Linux reports the largest of the child and the
    processes it waited for), so children run side by side are measured apart."""
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "dse.cli", "validate", *map(str, files)],
                                 cwd=REPO, stdin=subprocess.DEVNULL, stdout=output,
                                 stderr=subprocess.STDOUT)
        resource.prlimit(child.pid, resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))
        status, usage, timed_out = _wait(child.pid, timeout_s)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    return ProcessResult(exit_code=child.returncode, output=text, seconds=seconds,
                         max_rss_mb=usage.ru_maxrss / 1024, timed_out=timed_out)


@dataclass
class _Watch:
    exited: bool = False
    killed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _wait(pid: int, timeout_s: float) -> tuple[int, resource.struct_rusage, bool]:
    """Wait for ``pid``, SIGKILLing it after ``timeout_s``; its status, rusage and whether it was
    killed. The exit is first awaited without reaping (``WNOWAIT``): until it is reaped the pid
    cannot be reused, so the timer never signals another process."""
    watch = _Watch()

    def kill() -> None:
        with watch.lock:
            if not watch.exited:
                watch.killed = True
                os.kill(pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    with watch.lock:
        watch.exited = True
    timer.cancel()
    _, status, usage = os.wait4(pid, 0)
    return status, usage, watch.killed
