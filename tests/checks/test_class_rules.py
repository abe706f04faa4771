"""DESIGN §2, the rules about `__init__`, dependencies, names, the graph and the entrypoint."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import chains
from chains.loader import load_chain
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]

LEAF = """
class Leaf(chains.ChainletBase):
    async def run_remote(self, x: int) -> int:
        return x
"""


@dataclass(frozen=True)
class Expected:
    """One violation: a fragment of its message, a text on its line, and where it is."""

    message: str
    line: str | None = None
    where: str | None = None


# Chain files that break one rule each (or one rule several times), and what is reported.
VIOLATIONS = [
    pytest.param(
        LEAF
        + """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, size: int = 3) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [
            Expected(
                "parameter `size` needs a default of `chains.depends(SomeChainlet)`",
                "def __init__",
                "Entry.__init__",
            )
        ],
        id="init_parameter_needs_a_depends_default",
    ),
    pytest.param(
        LEAF
        + """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(
        self,
        context: chains.DeploymentContext = chains.depends_context(),
        leaf: Leaf = chains.depends(Leaf),
    ) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("must be the last parameter", "context: chains.DeploymentContext")],
        id="context_must_be_last",
    ),
    pytest.param(
        LEAF
        + """
class Other(chains.ChainletBase):
    async def run_remote(self, x: int) -> int:
        return x


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, leaf: Other = chains.depends(Leaf)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("`leaf` is annotated Other but depends on Leaf", "leaf: Other")],
        id="dependency_annotation_must_match",
    ),
    pytest.param(
        LEAF
        + """
class Speaker(Protocol):
    async def speak(self) -> str: ...


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, a: Speaker = chains.depends(Leaf)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("`a` is annotated Speaker but depends on Leaf")],
        id="protocol_not_satisfied",
    ),
    pytest.param(
        LEAF
        + """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(
        self,
        a: Leaf = chains.depends(Leaf, retries=-1),
        b: Leaf = chains.depends(Leaf, timeout_sec=0),
        c: Leaf = chains.depends(Leaf, concurrency_limit=0),
    ) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [
            Expected("retries must be a whole number >= 0, got -1", "a: Leaf"),
            Expected("timeout_sec must be a number > 0, got 0", "b: Leaf"),
            Expected("concurrency_limit must be a whole number >= 1", "c: Leaf"),
        ],
        id="depends_arguments_are_checked",
    ),
    pytest.param(
        """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, a: int = chains.depends(int)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("`chains.depends` must be used with a Chainlet class as argument")],
        id="depends_needs_a_chainlet_class",
    ),
    pytest.param(
        """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    async def run_remote(self) -> int:
        return 0

    def is_healthy(self, deep: bool) -> bool:
        return True


class Other(chains.ChainletBase):
    async def run_remote(self) -> int:
        return 0

    def is_healthy(self) -> str:
        return "yes"
""",
        [
            Expected("is_healthy takes only `self`", "def is_healthy(self, deep", "Entry.is_healthy"),
            Expected("must be annotated `-> bool`", where="Other.is_healthy"),
        ],
        id="is_healthy_signature",
    ),
    pytest.param(
        """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    remote_config = chains.RemoteConfig(name="not ok!")

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("chainlet name 'not ok!' must start with a letter", "class Entry", "Entry")],
        id="chainlet_name_must_be_valid",
    ),
    pytest.param(
        """
class A(chains.ChainletBase):
    remote_config = chains.RemoteConfig(name="Same")

    async def run_remote(self) -> int:
        return 0


class B(chains.ChainletBase):
    remote_config = chains.RemoteConfig(name="Same")

    async def run_remote(self) -> int:
        return 0


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, a: A = chains.depends(A), b: B = chains.depends(B)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""",
        [Expected("chainlet name 'Same' is also used by", "class B")],
        id="chainlet_names_must_be_unique",
    ),
    # depends() needs a defined class, so a cycle can only be made by editing defaults later.
    pytest.param(
        LEAF
        + """
class A(chains.ChainletBase):
    def __init__(self, dep: chains.ChainletBase = chains.depends(Leaf)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0


@chains.mark_entrypoint
class B(chains.ChainletBase):
    def __init__(self, a: A = chains.depends(A)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0


A.__init__.__defaults__ = (chains.depends(B),)
""",
        [Expected("dependency cycle: B -> A -> B")],
        id="dependency_cycle",
    ),
]


@pytest.mark.parametrize(("source", "expected"), VIOLATIONS)
def test_rule_violations_are_reported_where_they_are(
    chain_file: Write, source: str, expected: list[Expected]
) -> None:
    f = chain_file(source)
    found = f.violations()
    assert len(found) == len(expected), "\n".join(map(str, found))
    for violation, want in zip(found, expected, strict=True):
        assert want.message in violation.message
        if want.line is not None:
            assert violation.line == f.line(want.line)
        if want.where is not None:
            assert violation.where == want.where


def test_dependency_annotation_may_be_a_base_or_a_protocol(chain_file: Write) -> None:
    f = chain_file(
        LEAF
        + """
class Doubler(Protocol):
    async def run_remote(self, x: int) -> int: ...


class Base(chains.ChainletBase):
    async def run_remote(self, x: int) -> int:
        return x


class Derived(Base):
    pass


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, a: Doubler = chains.depends(Leaf), b: Base = chains.depends(Derived)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
"""
    )
    chain = load_chain(f.path)
    assert [d.name for d in chain.entrypoint.dependencies] == ["Leaf", "Derived"]


def test_no_entrypoint_names_the_candidates(chain_file: Write) -> None:
    f = chain_file(
        LEAF
        + """
class Other(chains.ChainletBase):
    async def run_remote(self) -> int:
        return 0
"""
    )
    with pytest.raises(
        chains.ChainsUsageError, match=r"2 chainlets and none marked as entrypoint \(Leaf, Other\); mark one"
    ):
        load_chain(f.path)
    assert load_chain(f.path, entrypoint="Leaf").entrypoint.name == "Leaf"


def test_the_only_chainlet_of_a_file_needs_no_mark(chain_file: Write) -> None:
    assert load_chain(chain_file(LEAF).path).entrypoint.name == "Leaf"


def test_two_entrypoints_are_named(chain_file: Write) -> None:
    f = chain_file("""
@chains.mark_entrypoint
class A(chains.ChainletBase):
    async def run_remote(self) -> int:
        return 0


@chains.mark_entrypoint("chain-b")
class B(chains.ChainletBase):
    async def run_remote(self) -> int:
        return 0
""")
    with pytest.raises(chains.ChainsUsageError, match="2 chainlets are marked as entrypoint: A, B"):
        load_chain(f.path)
    chain = load_chain(f.path, entrypoint="B")
    assert (chain.name, chain.entrypoint.name) == ("chain-b", "B")


def test_unknown_entrypoint_name(chain_file: Write) -> None:
    f = chain_file(LEAF)
    with pytest.raises(
        chains.ChainsUsageError, match="no chainlet named 'Nope'; chainlets in the file: Leaf"
    ):
        load_chain(f.path, entrypoint="Nope")


def test_every_violation_in_a_file_is_reported_together(chain_file: Write) -> None:
    f = chain_file("""
class First(chains.ChainletBase):
    async def run_remote(self, x) -> int:
        return 0


class Second(chains.ChainletBase):
    def run_remote(self) -> Iterator[str]:
        yield "x"


@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, first: First = chains.depends(First, retries=-2)) -> None:
        pass

    async def run_remote(self) -> int:
        return 0
""")
    found = f.violations()
    assert [v.where for v in found] == ["First.run_remote", "Second.run_remote", "Entry.__init__"]
    assert [v.line for v in found] == [
        f.line("async def run_remote(self, x)"),
        f.line("def run_remote(self) -> Iterator"),
        f.line("def __init__"),
    ]
    report = str(chains.ChainsUsageError(violations=found))
    assert report.startswith("3 problems found in the chain:")


def test_checks_raise_at_definition_outside_the_loader() -> None:
    with pytest.raises(chains.ChainsUsageError) as info:

        class Broken(chains.ChainletBase):
            async def run_remote(self, x) -> int:  # type: ignore[no-untyped-def]
                return 0

    (violation,) = info.value.violations
    assert violation.where == "Broken.run_remote"
    assert violation.path == __file__


def test_constructing_a_chainlet_by_hand_is_refused() -> None:
    class Fine(chains.ChainletBase):
        async def run_remote(self) -> int:
            return 1

    with pytest.raises(chains.ChainsRuntimeError, match=r"use `with chains.run_local\(\): Fine\(\)`"):
        Fine()
    with chains.run_local():
        assert asyncio.run(Fine().run_remote()) == 1


def test_two_files_may_define_the_same_class_name_and_load_twice(chain_file: Write) -> None:
    body = """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    async def run_remote(self) -> str:
        return "{}"
"""
    one = chain_file(body.replace("{}", "one"))
    two = chain_file(body.replace("{}", "two"))
    first, second, again = load_chain(one.path), load_chain(two.path), load_chain(one.path)
    assert first.entrypoint.cls is not second.entrypoint.cls
    assert again.entrypoint.name == "Entry"
    with chains.run_local():
        assert asyncio.run(second.entrypoint.cls().run_remote()) == "two"
        assert asyncio.run(again.entrypoint.cls().run_remote()) == "one"


def test_chain_file_that_fails_to_import(chain_file: Write) -> None:
    f = chain_file("raise RuntimeError('boom at import')\n")
    with pytest.raises(chains.ChainsUsageError, match="importing the chain file failed") as info:
        load_chain(f.path)
    assert "boom at import" in str(info.value)


def test_cli_check_reports_problems_and_exits_1(chain_file: Write, tmp_path: Path) -> None:
    f = chain_file(
        LEAF
        + """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, leaf: Leaf = chains.depends(Leaf, retries=-1)) -> None:
        pass

    async def run_remote(self, x) -> int:
        return 0
"""
    )
    result = subprocess.run(
        [sys.executable, "-m", "chains", "check", str(f.path)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "2 problems found:"
    assert lines[1].startswith(f"  {f.path}:{f.line('def __init__')} (Entry.__init__): ")
    assert lines[2].startswith(f"  {f.path}:{f.line('async def run_remote(self, x)')} (Entry.run_remote): ")


def test_cli_check_summarises_a_clean_chain(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "hello" / "chain.py"
    result = subprocess.run(
        [sys.executable, "-m", "chains", "check", str(example)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok: chain 'hello' in {example}: 2 chainlets, entrypoint Hello"
    assert lines[1].split() == [
        "Hello",
        "async",
        "run_remote(names:",
        "list[str])",
        "->",
        "list[str]",
        "(calls",
        "Greeter)",
    ]
    assert "Greeter" in lines[2] and "punctuation: str = '!'" in lines[2]
