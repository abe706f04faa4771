"""What ``chains check`` says where Truss Chains' users found it unclear (the cases of the
Truss suites that passed here with a misleading message)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.checks.conftest import ChainFile
from tests.helpers import Cli

Write = Callable[..., ChainFile]


def test_problems_and_no_entrypoint_print_the_problems_then_the_entrypoint_note(chain_file: Write) -> None:
    f = chain_file(
        """
        class One(chains.ChainletBase):
            async def run_remote(self, x: object) -> int:
                return 0


        class Two(chains.ChainletBase):
            def __init__(self, context, other=chains.depends(One)) -> None:
                pass

            async def run_remote(self) -> int:
                return 0
        """
    )
    result = Cli(Path("unused")).run("check", str(f.path), check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "2 problems found:"
    assert lines[1].startswith(f"  {f.path}:{f.line('x: object')} (One.run_remote): parameter `x`")
    assert lines[2].startswith(f"  {f.path}:{f.line('def __init__')} (Two.__init__): The init argument")
    assert lines[3] == (
        f"also: {f.path}: 2 chainlets and none marked as entrypoint (One, Two); mark one with "
        "@chains.mark_entrypoint or pass --entrypoint NAME"
    )
    assert ":0:" not in result.stderr and len(lines) == 4


def test_a_file_without_chainlets_says_so_rather_than_asking_for_an_entrypoint(chain_file: Write) -> None:
    f = chain_file(
        """
        class Model:
            def predict(self, x: int) -> int:
                return x
        """
    )
    result = Cli(Path("unused")).run("check", str(f.path), check=False)
    assert result.returncode == 1
    assert "no class in the file inherits from chains.ChainletBase or chains.ModelBase" in result.stderr
    assert "--entrypoint" not in result.stderr


def test_rpc_options_given_to_depends_is_named_as_written(chain_file: Write) -> None:
    f = chain_file(
        """
        class Entry(chains.ChainletBase):
            def __init__(self, dep=chains.depends(chains.RPCOptions)) -> None:
                pass

            async def run_remote(self) -> int:
                return 0
        """
    )
    [violation] = f.violations()
    assert "got chains.RPCOptions" in violation.message and "StubOptions" not in violation.message
