"""How long a command takes to answer when it has little to do: `knoblab --help`, and
`knoblab runs` listing the newest three runs of a store of finished runs (the test suite's
golden store: with their answers kept as runs now keep them, and as an older store without),
and `knoblab report` of a query sweep of that store (a command that judges), each a new
process as a user starts it.

    .venv/bin/python benchmarks/start_time.py --times 7

Each command is run `--times` times (after one untimed run, so that the files it imports are
in the page cache, as they are for a user's second command); printed: the median and range of
its wall time, its peak memory (the largest resident set of the runs), and the knoblab
modules and third-party packages it imported (`python -X importtime`, the evidence of what a
command pays for before it starts its work). Goals: --help 0.15 s, runs 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KNOBLAB = [sys.executable, "-m", "knoblab.cli"]


GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "data" / "golden" / "store.sqlite"
QUERY_SWEEP = "b96b0a30"  # the golden store's golden-query-sweep


def _store(folder: Path, kept: bool) -> str:
    """A store of finished runs, as `knoblab runs` would list: the test suite's golden store
    (runs of every kind a real knoblab made). `kept`: with each run's answer kept as a run
    keeps it when it ends (commands.keep_answer); without: a store of runs that ended before
    answers were kept, each judged again to be listed."""
    path = folder / ("kept.sqlite" if kept else "older.sqlite")
    shutil.copyfile(GOLDEN, path)
    url = f"sqlite:///{path}"
    if kept:  # in a process of its own: what it imports would count in the commands' memory
        subprocess.run([sys.executable, __file__, "--keep-answers", url], check=True)
    return url


def _keep_answers(url: str) -> None:
    from knoblab.commands import keep_answer
    from knoblab.results import build_results
    from knoblab.store import Store
    from knoblab.vocabulary import Experiment, RunStatus

    store = Store(url)
    for run in store.each_run(None):
        if run["status"] == RunStatus.DONE and Experiment(run["kind"]).has_points:
            keep_answer(store, build_results(store, run["id"]))


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one run of `command` (its own, from wait4)."""
    began = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    said = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {said.strip()}")
    return seconds, usage.ru_maxrss / 1024  # KiB on Linux


def _imported(command: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The knoblab modules and the third-party top-level packages `command` imports."""
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], env=env,
                          capture_output=True, text=True, check=False)
    names = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and "|" in line and "[us]" not in line]
    ours = sorted({n for n in names if n.startswith("knoblab")})
    stdlib = set(sys.stdlib_module_names)
    theirs = sorted({n.split(".")[0] for n in names
                     if n.split(".")[0] not in stdlib and not n.startswith(("knoblab", "_"))})
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=7)
    parser.add_argument("--keep-answers", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keep_answers:
        return _keep_answers(args.keep_answers)
    with tempfile.TemporaryDirectory() as folder:
        kept, older = _store(Path(folder), kept=True), _store(Path(folder), kept=False)
        # As a user's shell runs it: Python keeps the bytecode of what it imported (some
        # environments switch that off, and every start then compiles knoblab anew).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["KNOBLAB_HOME"] = f"{folder}/home"
        commands = {"knoblab --help": [*KNOBLAB, "--help"],
                    "knoblab runs --limit 3": [*KNOBLAB, "--store", kept, "runs", "--limit",
                                               "3"],
                    "knoblab runs --limit 3, an older store": [
                        *KNOBLAB, "--store", older, "runs", "--limit", "3"],
                    # a command that judges: a query sweep's report (its statistics, its
                    # tables, its chart), as a user asks for it again
                    "knoblab report, a query sweep": [
                        *KNOBLAB, "--store", kept, "report", QUERY_SWEEP, "--out",
                        f"{folder}/report"]}
        print("| command | median | range | peak memory | knoblab modules imported | "
              "packages imported |")
        print("|---|---|---|---|---|---|")
        for name, command in commands.items():
            _timed(command, env)  # its files into the page cache
            runs = [_timed(command, env) for _ in range(args.times)]
            seconds = [s for s, _ in runs]
            ours, theirs = _imported(command, env)
            print(f"| `{name}` | {statistics.median(seconds):.3f} s | {min(seconds):.3f}–"
                  f"{max(seconds):.3f} s | {max(m for _, m in runs):.0f} MiB | {len(ours)} | "
                  f"{', '.join(theirs) or 'none'} |")


if __name__ == "__main__":
    main()
