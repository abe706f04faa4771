"""Beyond Truss: a chainlet built by hand inside a *served* chainlet's ``__init__`` is refused
too (Truss checks only under ``run_local``), and the refusal names the line that did it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli, write_chain

SOURCE = """
import chains


class Leaf(chains.ChainletBase):
    async def run_remote(self) -> str:
        return "leaf"


@chains.mark_entrypoint("naive")
class Entry(chains.ChainletBase):
    def __init__(self) -> None:
        self._leaf = Leaf()

    async def run_remote(self) -> str:
        return await self._leaf.run_remote()
"""


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home")
    yield tool
    tool.run("stop", "naive", check=False)


def test_a_served_chainlet_that_builds_one_by_hand_fails_to_start_naming_the_line(
    cli: Cli, tmp_path: Path
) -> None:
    file = write_chain(tmp_path / "chain", SOURCE)
    # The checks cannot see the call (it runs only when the server builds Entry): they pass.
    assert cli.run("check", str(file)).stdout.startswith("ok: chain 'naive'")
    pushed = cli.run("push", str(file), timeout=180, check=False)
    assert pushed.returncode != 0, pushed.stdout
    output = pushed.stdout + pushed.stderr
    assert "Chainlets cannot be naively instantiated" in output, output
    # The line of `Leaf()` in the user's own file, not in the copy the chainlet runs from.
    assert f'File "{file}", line 13: Chainlets cannot be naively instantiated' in output, output
    assert "`Leaf()` is called inside Entry.__init__" in output, output


def test_under_run_local_the_refusal_names_this_file_and_line() -> None:
    import chains

    class Leaf(chains.ChainletBase):
        async def run_remote(self) -> str:
            return "leaf"

    class Entry(chains.ChainletBase):
        def __init__(self) -> None:
            self._leaf = Leaf()

        async def run_remote(self) -> str:
            return "entry"

    line = Entry.__init__.__code__.co_firstlineno + 1
    with chains.run_local(), pytest.raises(chains.ChainsRuntimeError) as raised:
        Entry()
    assert str(raised.value).startswith(f'File "{__file__}", line {line}: Chainlets cannot be naively')
    assert f'Entry.__init__ (File "{__file__}", line {line})' in str(raised.value)
    with chains.run_local():
        assert isinstance(Leaf(), Leaf)  # built by the test itself: allowed
