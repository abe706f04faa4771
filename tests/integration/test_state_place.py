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


def test_a_push_says_what_it_replaced(tmp_path: Path) -> None:
    from tests.helpers import write_chain

    cli = Cli(tmp_path / "home")
    source = """
        import chains

        class Greeter(chains.ChainletBase):
            async def run_remote(self, name: str) -> str:
                return "Hello, " + name

        @chains.mark_entrypoint("mychain")
        class Entry(chains.ChainletBase):
            def __init__(self, greeter: Greeter = chains.depends(Greeter)) -> None:
                self._greeter = greeter

            async def run_remote(self, name: str) -> str:
                return await self._greeter.run_remote(name)
    """
    first = write_chain(tmp_path / "one", source)
    try:
        assert cli.push(str(first))["replaced"] is None
        first.write_text(first.read_text().replace('"Hello, "', '"Hi, "'))
        again = cli.run("push", str(first)).stdout
        assert again.startswith(
            "replaced the running chain 'mychain' (code changed: Greeter; unchanged: Entry)"
        )
        solo = "import chains\n\n@chains.mark_entrypoint\nclass Solo(chains.ChainletBase):\n"
        solo += "    async def run_remote(self) -> int:\n        return 1\n"
        other = write_chain(tmp_path / "two", solo)
        payload = cli.push(str(other), "--name", "mychain")
        replaced = payload["replaced"]
        assert replaced["source"] == str(first) and replaced["same_source"] is False
        assert replaced["added"] == ["Solo"] and replaced["removed"] == ["Entry", "Greeter"]
    finally:
        cli.run("stop", "mychain", check=False)
