"""The generator prints imports and code as ruff would: checked against ruff itself."""

from __future__ import annotations

import ast
import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from chains_codegen.imports import Imports
from chains_codegen.layout import templates
from chains_codegen.pysource import bracketed, expression

DOCUMENTED = [f"chains_codegen.{name}" for name in ("pysource", "imports", "ignore", "layout", "descriptor")]


@pytest.mark.parametrize("module", DOCUMENTED)
def test_docstring_examples(module: str) -> None:
    failures, _ = doctest.testmod(importlib.import_module(module))
    assert failures == 0


def _ruff(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "ruff.toml").write_text(
        templates().get_template("ruff.toml.jinja").render(header="#", first_party=["chain", "chains_stubs"])
    )
    (tmp_path / "module.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "module.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_import_blocks_are_sorted_as_ruff_sorts_them(tmp_path: Path) -> None:
    block = Imports(first_party={"chain", "chains_stubs"})
    block.add_module("typing")
    block.add_module("collections.abc", "cabc")
    block.add_module("numpy", "np")
    block.add_module("chains")
    block.add_module("chain")
    block.add_from("typing", "AsyncIterator", "AI")
    block.add_from("typing", "Annotated")
    block.add_from("chain", name="helper")
    block.add_from("chain", "TOKENS")
    block.add_from("chain", "Token10")
    block.add_from("chain", "Token2")
    block.add_from("chain", "A_B")
    block.add_from("chains.stubs", "StubBase")
    block.add_from("pydantic", "BaseModel")
    block.add_from("chains_stubs.text_gen", "TextGenStub")
    for i in range(12):
        block.add_from("chain", f"VeryLongGeneratedTypeName{i}")
    source = "\n".join(block.lines()) + "\n"
    assert "from chain import (\n    A_B,\n    TOKENS,\n" in source  # wrapped one name per line
    done = _ruff(tmp_path, source, "check", "--select", "I")
    assert done.returncode == 0, source + done.stdout


@pytest.mark.parametrize("width", [10, 40, 80, 100, 140])
def test_long_signatures_and_calls_are_split_as_ruff_splits_them(tmp_path: Path, width: int) -> None:
    params = [f"parameter_{i}: dict[str, list[int]] = {{}}" for i in range(width // 20)] or ["x: int"]
    lines = ["class Stub:"]
    lines += bracketed(
        "    async def run_remote(", ["self", *params], ") -> dict[str, list[int]]:", indent="    "
    )
    keywords = [f"{p.split(':')[0]}={p.split(':')[0]}" for p in params]
    lines += bracketed(
        "        result: dict[str, list[int]] = await self.call_remote(", keywords, ")", indent="        "
    )
    lines.append("        return result")
    source = "\n".join(lines) + "\n"
    done = _ruff(tmp_path, source, "format", "--check", "--diff")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "text",
    [
        "'plain'",
        '"it\'s"',
        "'say \"hi\"'",
        "'both \\' and \"'",
        "'tab\\there\\n'",
        "b'\\x00\\xff\"'",
        "-1.5e-07",
        "(1,)",
        "()",
        "{'a': [1, 2], 'b': {3}}",
        "Literal['a', 'b'] | None",
        "(a | b) & c",
        "a - (b - c)",
        "2 ** -1",
        "f(x, key='v')",
        "x[1:2]",
    ],
)
def test_expressions_are_printed_as_ruff_formats_them(tmp_path: Path, text: str) -> None:
    printed = expression(ast.parse(text, mode="eval").body)
    assert ast.dump(ast.parse(printed, mode="eval")) == ast.dump(ast.parse(text, mode="eval"))
    done = _ruff(tmp_path, f"value = {printed}\n", "format", "--check", "--diff")
    assert done.returncode == 0, done.stdout
