"""A type checker sees only the parts a StreamTypes declares: mypy rejects the others."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "typing_cases"
_ERROR_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


def expected_errors(path: Path) -> dict[int, str]:
    """Line number -> the text its ``# E:`` comment says mypy's error must contain."""
    expected = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if "# E: " in line:
            expected[number] = line.split("# E: ", 1)[1].strip()
    return expected


def run_mypy(path: Path, cache_dir: Path) -> dict[int, list[str]]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",  # only this file's errors, not those of modules it imports
            "--no-error-summary",
            "--hide-error-context",
            "--cache-dir",
            str(cache_dir),
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,  # the project's mypy settings (pydantic plugin) apply
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    errors: dict[int, list[str]] = {}
    for line in result.stdout.splitlines():
        match = _ERROR_LINE.match(line)
        if match:
            errors.setdefault(int(match["line"]), []).append(match["message"])
    return errors


def test_mypy_rejects_parts_the_stream_types_do_not_declare(tmp_path: Path) -> None:
    case = CASES / "stream_parts.py"
    expected = expected_errors(case)
    assert len(expected) >= 8
    errors = run_mypy(case, tmp_path / "mypy-cache")
    unexpected = {line: messages for line, messages in errors.items() if line not in expected}
    assert not unexpected, f"mypy errors on lines that should type-check: {unexpected}"
    for line, fragment in expected.items():
        messages = errors.get(line, [])
        assert any(fragment in message for message in messages), (
            f"line {line}: expected a mypy error containing {fragment!r}, got {messages}"
        )
