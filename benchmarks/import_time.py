"""What ``import chains`` and a generated chainlet server's imports cost, from one or more source trees.

Each run is a fresh ``python -X importtime`` process; trees take turns run by run, so that the
machine's drift hits every tree alike. Two statements are measured:

- ``import chains``: what a chain file, a script or a client pays;
- ``chainlet server``: the generated ``server.py`` of ``Front`` in ``benchmarks/chains/one_hop.py``
  (a chainlet with a dependency, so its stub is built too) run up to serving: its imports, the
  chain file's, the generated stubs', and ``create_app``.

The figure per run is the sum of the cumulative times of the top-level imports the statement
made (``-X importtime`` reports every import once, nested under the one that caused it), and
beside it the process's CPU time over the statement, which moves less than wall-clock time when
other work shares the machine. Medians over the runs are reported, with the modules loaded,
the third-party packages among them, and the imports that cost the most.

Each ``--tree`` is a directory holding a copy of the SDK (``chains/``), for instance an export
of an older commit; run from the repository root::

    mkdir OLD && git archive HEAD~3 chains codegen | tar -x -C OLD
    .venv/bin/python -m benchmarks.import_time --tree OLD --tree .
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.chainlets import CHAINS_DIR, generate_chain

START, END = "-- measured statement starts --", "-- measured statement ends --"
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)$")

# The chainlet's environment as the local target gives it; the dependency is never called.
SERVER_ENV = {
    "CHAINS_INTERNAL_TOKEN": "benchmark",
    "CHAINS_DEPENDENCY_URLS": json.dumps({"Back": ["http://127.0.0.1:9"]}),
    "CHAINS_IS_ENTRYPOINT": "1",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    statement: str
    cwd: Path | None = None


@dataclass
class Run:
    total_us: int  # the statement's top-level imports, cumulative
    wall_s: float
    cpu_s: float  # this process's user + system time over the statement
    cumulative_us: dict[str, int]  # every module the statement imported
    modules: list[str]


def probe_code(tree: Path, statement: str) -> str:
    """The ``-c`` program: ``tree`` first on ``sys.path``, the statement between two markers."""
    return "\n".join(
        [
            "import json, resource, sys, time",
            "def cpu():",
            "    usage = resource.getrusage(resource.RUSAGE_SELF)",
            "    return usage.ru_utime + usage.ru_stime",
            f"sys.path.insert(0, {str(tree)!r})",
            "before = set(sys.modules)",
            f"sys.stderr.write({START!r} + '\\n'); sys.stderr.flush()",
            "t0, c0 = time.perf_counter(), cpu()",
            statement,
            "wall, cpu_s = time.perf_counter() - t0, cpu() - c0",
            f"sys.stderr.write({END!r} + '\\n'); sys.stderr.flush()",
            "print(json.dumps({'wall': wall, 'cpu': cpu_s, 'modules': sorted(set(sys.modules) - before)}))",
        ]
    )


def measure(tree: Path, scenario: Scenario) -> Run:
    env = {**os.environ, **SERVER_ENV, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe_code(tree, scenario.statement)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=scenario.cwd or tree,
        env=env,
        check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"{scenario.name} from {tree} failed:\n{completed.stderr[-3000:]}")
    lines = completed.stderr.splitlines()
    inside = lines[lines.index(START) + 1 : lines.index(END)]
    total = 0
    cumulative: dict[str, int] = {}
    for line in inside:
        match = _LINE.match(line)
        if match is None:
            continue
        _, cum, indent, name = match.groups()
        cumulative[name] = int(cum)
        if not indent:
            total += int(cum)
    result = json.loads(completed.stdout.splitlines()[-1])
    return Run(total, float(result["wall"]), float(result["cpu"]), cumulative, list(result["modules"]))


# The chain's own modules, and one the interpreter makes for compiled extensions.
_NOT_PACKAGES = {"chains", "chains_stubs", "one_hop", "cython_runtime"}


def third_party(modules: Sequence[str]) -> list[str]:
    tops = {m.partition(".")[0] for m in modules}
    return sorted(
        t for t in tops - _NOT_PACKAGES if t not in sys.stdlib_module_names and not t.startswith("_")
    )


def summarize(runs: Sequence[Run], top: int) -> dict[str, Any]:
    names = {name for run in runs for name in run.cumulative_us}
    medians = {name: statistics.median(run.cumulative_us.get(name, 0) for run in runs) for name in names}
    heaviest = sorted(medians.items(), key=lambda item: item[1], reverse=True)[:top]
    modules = runs[0].modules
    return {
        "import_ms": statistics.median(r.total_us for r in runs) / 1000,
        "import_ms_min": min(r.total_us for r in runs) / 1000,
        "import_ms_max": max(r.total_us for r in runs) / 1000,
        "wall_ms": statistics.median(r.wall_s for r in runs) * 1000,
        "cpu_ms": statistics.median(r.cpu_s for r in runs) * 1000,
        "modules": len(modules),
        "chains_modules": sorted(m for m in modules if m.startswith("chains")),
        "third_party": third_party(modules),
        "heaviest_ms": [(name, value / 1000) for name, value in heaviest],
        "runs_ms": [r.total_us / 1000 for r in runs],
    }


def tables(results: dict[str, dict[str, dict[str, Any]]], names: Sequence[str]) -> str:
    out: list[str] = []
    for scenario, by_tree in results.items():
        base = by_tree[names[0]]
        out.append(f"{scenario}")
        header = (
            f"  {'tree':<24} {'import ms':>10} {'(min-max)':>15} {'ratio':>6} {'cpu ms':>7} {'ratio':>6} "
            f"{'modules':>8}"
        )
        out += [header, "  " + "-" * (len(header) - 2)]
        for name in names:
            s = by_tree[name]
            spread = f"{s['import_ms_min']:.0f}-{s['import_ms_max']:.0f}"
            ratio, cpu_ratio = s["import_ms"] / base["import_ms"], s["cpu_ms"] / base["cpu_ms"]
            out.append(
                f"  {name:<24} {s['import_ms']:>10.0f} {spread:>15} {ratio:>6.2f} "
                f"{s['cpu_ms']:>7.0f} {cpu_ratio:>6.2f} {s['modules']:>8}"
            )
        for name in names:
            s = by_tree[name]
            out.append(f"  {name}: third-party packages: {', '.join(s['third_party'])}")
            heaviest = ", ".join(f"{m} {ms:.0f}" for m, ms in s["heaviest_ms"])
            out.append(f"  {name}: heaviest imports (cumulative ms): {heaviest}")
        out.append("")
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tree", type=Path, action="append", help="a source tree; repeat (default: .)")
    parser.add_argument("--runs", type=int, default=9, help="processes per tree and statement")
    parser.add_argument("--top", type=int, default=10, help="heaviest imports listed")
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    parser.add_argument("--json", action="store_true", help="write benchmarks/results/import_time.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.datetime.now(datetime.UTC)
    trees = [t.resolve() for t in (args.tree or [Path(".")])]
    for tree in trees:
        if not (tree / "chains" / "__init__.py").is_file():
            raise SystemExit(f"{tree} holds no chains/ package")
    names = [f"{i}:{tree.name or tree}" for i, tree in enumerate(trees)]
    with tempfile.TemporaryDirectory(prefix="chains-bench-") as tmp:
        chain = generate_chain(CHAINS_DIR / "one_hop.py", Path(tmp))
        scenarios = [
            Scenario("import chains", "import chains"),
            Scenario(
                "chainlet server",
                "import runpy; runpy.run_path('server.py', run_name='server')",
                cwd=chain.chainlets["Front"].directory,
            ),
        ]
        runs: dict[tuple[str, str], list[Run]] = {}
        for _ in range(args.runs):
            for scenario in scenarios:
                for name, tree in zip(names, trees, strict=True):
                    runs.setdefault((scenario.name, name), []).append(measure(tree, scenario))
    results = {s.name: {name: summarize(runs[(s.name, name)], args.top) for name in names} for s in scenarios}
    print(tables(results, names))
    if args.json or args.output:
        environment = {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": os.getloadavg(),
            "trees": names,
        }
        report.write_results(
            "import_time",
            {"runs": args.runs, "results": results},
            args.output,
            started=started,
            environment=environment,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
