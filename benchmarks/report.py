"""What the HTTP benchmarks share: their command-line options, the table they print, the JSON they write."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness

__all__ = [
    "RESULTS_DIR",
    "Check",
    "add_load_arguments",
    "check_lines",
    "loads_from",
    "summary_table",
    "write_results",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def add_load_arguments(
    parser: argparse.ArgumentParser, *, duration: float = 4.0, rounds: int = 5
) -> argparse.ArgumentParser:
    parser.add_argument("--connections", default="1,16,64", help="comma-separated connection counts")
    parser.add_argument("--duration", type=float, default=duration, help="seconds per wrk run")
    parser.add_argument(
        "--rounds", type=int, default=rounds, help="interleaved rounds; medians are over these"
    )
    parser.add_argument("--output", type=Path, help="where to write the JSON results")
    return parser


def loads_from(args: argparse.Namespace) -> list[harness.LoadSpec]:
    return [
        harness.LoadSpec(connections=int(c), duration_s=args.duration) for c in args.connections.split(",")
    ]


def summary_table(summaries: Sequence[harness.Summary], baseline: Mapping[str, str]) -> str:
    """Medians per target and load; ``baseline`` maps a target to the one its ratios are taken against."""
    by_key = {(s.target, s.load.connections): s for s in summaries}
    header = (
        f"{'conns':>5}  {'target':<22} {'rps':>8} {'p50 ms':>8} {'p99 ms':>8}  {'rps/base':>8} "
        f"{'p50/base':>8} {'cpu us/req':>10} {'spread':>7} {'other':>6} {'errors':>6}"
    )
    lines = [header, "-" * len(header)]
    for s in sorted(summaries, key=lambda s: s.load.connections):
        base = by_key.get((baseline.get(s.target, s.target), s.load.connections), s)
        lines.append(
            f"{s.load.connections:>5}  {s.target:<22} {s.rps:>8.0f} {s.p50_ms:>8.3f} {s.p99_ms:>8.3f}  "
            f"{s.rps / base.rps:>7.2f}x {s.p50_ms / base.p50_ms:>7.2f}x "
            f"{s.server_cpu_per_request_us:>10.1f} {s.rps_spread:>6.0%} {s.other_cores:>6.2f} {s.errors:>6}"
        )
    return "\n".join(lines)


class Check:
    """One target of an issue: a measured figure against its bound."""

    def __init__(self, name: str, value: float, bound: float, *, at_least: bool, unit: str = "") -> None:
        self.name = name
        self.value = value
        self.bound = bound
        self.at_least = at_least
        self.unit = unit

    @property
    def met(self) -> bool:
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "bound": self.bound,
            "at_least": self.at_least,
            "unit": self.unit,
            "met": self.met,
        }

    def line(self) -> str:
        relation = ">=" if self.at_least else "<="
        verdict = "met" if self.met else "MISSED"
        target = f"target {relation} {self.bound:g}{self.unit}"
        return f"{self.name}: {self.value:.3g}{self.unit} ({target}): {verdict}"


def check_lines(checks: Sequence[Check]) -> str:
    return "\n".join(c.line() for c in checks)


def write_results(
    name: str,
    report: dict[str, Any],
    output: Path | None = None,
    *,
    started: datetime.datetime,
    environment: dict[str, Any],
) -> Path:
    """Write ``report`` with the run's environment and times as ``results/<name>.json`` (or
    ``output``), and say where on stderr."""
    path = output or RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": name,
        "started_utc": started.isoformat(timespec="seconds"),
        "environment": environment,
        **report,
    }
    report.setdefault("finished_utc", datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    report.setdefault("loadavg_at_end", os.getloadavg())
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return path
