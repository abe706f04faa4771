"""Commands that find no chain name the folder they looked in."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Cli


def test_status_and_logs_name_the_folder_they_looked_in(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "elsewhere" / ".chains")
    empty = cli.run("status").stdout
    assert empty.startswith(f"no chains are running in {cli.home}")
    assert "CHAINS_HOME" in empty
    missing = cli.run("status", "mychain", check=False)
    assert missing.returncode == 1 and f"no chain named 'mychain' in {cli.home}" in missing.stderr
    logs = cli.run("logs", "mychain", check=False)
    assert logs.returncode == 1 and str(cli.home) in logs.stderr
