"""The browser fixture without a browser: a skip saying how to enable it, or a failure in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NEEDS_A_BROWSER = "def test_needs_a_browser(browser):\n    assert browser is not None\n"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_needs_a_browser.py"
    test.write_text(NEEDS_A_BROWSER)
    environment = {k: v for k, v in os.environ.items() if k != "CHAINS_REQUIRE_BROWSER"}
    environment.update(CHAINS_CHROMIUM=str(tmp_path / "no-chromium-here"), **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.browser_support",
            "-rs",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test),
        ],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("required", [False, True])
def test_without_chromium_the_browser_tests_skip_or_fail_saying_how_to_enable_them(
    tmp_path: Path, required: bool
) -> None:
    result = _run(tmp_path, **({"CHAINS_REQUIRE_BROWSER": "1"} if required else {}))
    assert "apt-get install chromium" in result.stdout and "pip install playwright" in result.stdout
    if required:
        assert result.returncode == 1 and "1 error" in result.stdout
        assert "CHAINS_REQUIRE_BROWSER=1 but no chromium at" in result.stdout
    else:
        assert result.returncode == 0 and "1 skipped" in result.stdout
