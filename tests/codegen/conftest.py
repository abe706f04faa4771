"""Generated trees of the example chains, built once per test session, and import isolation."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chains.loader import load_chain
from chains_codegen import GeneratedChain, generate

REPO = Path(__file__).resolve().parents[2]
CHAINS_DIR = Path(__file__).resolve().parent / "chains"

EXAMPLES = {
    "hello": REPO / "examples" / "hello" / "chain.py",
    "streaming": REPO / "examples" / "streaming" / "chain.py",
    "streams": CHAINS_DIR / "streams" / "chain.py",
    "future": CHAINS_DIR / "future" / "chain.py",
    "neighbour": CHAINS_DIR / "neighbour" / "chain.py",
}


def generate_in(workdir: Path, chain_file: Path, out: str = "build") -> GeneratedChain:
    """Generate ``chain_file`` from ``workdir`` into the relative ``out``, as a user would."""
    chain = load_chain(chain_file)
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.chdir(workdir):
        result = generate(chain, chain_file, Path(out))
    return GeneratedChain(
        result.name,
        workdir / result.out_dir,
        result.entrypoint,
        {
            name: type(c)(c.name, workdir / c.directory, c.code_version, c.is_entrypoint)
            for name, c in result.chainlets.items()
        },
    )


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GeneratedChain]:
    """Every example, generated once: ``generated["hello"].chainlets["Greeter"].directory``."""
    root = tmp_path_factory.mktemp("generated")
    return {name: generate_in(root / name, path) for name, path in EXAMPLES.items()}


def descriptor(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "chainlet.json").read_text())
    return data


@contextlib.contextmanager
def imports_from(directory: Path) -> Iterator[None]:
    """Import a generated chainlet's modules (its stubs, its copied source) in this process.

    Everything imported inside is forgotten afterwards, so the next chainlet's ``chain``
    and ``chains_stubs`` are its own.
    """
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    sys.path[:0] = [str(directory / "src"), str(directory)]
    try:
        yield
    finally:
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            del sys.modules[name]
