"""Every example chain (and a chain using every deployment setting) exported once per session."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from chains.loader import load_chain
from chains.model import Chain
from chains.targets import export_target, options_for

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

CHAINS = {
    "hello": REPO / "examples" / "hello" / "chain.py",
    "streaming": REPO / "examples" / "streaming" / "chain.py",
    "realtime": REPO / "examples" / "realtime" / "chain.py",
    "openai": REPO / "examples" / "openai" / "chain.py",
    "rich": HERE / "chains" / "rich" / "chain.py",
}
assert sorted(p.parent.name for p in (REPO / "examples").glob("*/chain.py")) == sorted(
    name for name, path in CHAINS.items() if path.parent.parent.name == "examples"
), "a new example chain: add it to CHAINS"

# The chains Truss serves: one with @chains.route endpoints is refused (test_routes_exports.py).
TRUSS_CHAINS = {name: path for name, path in CHAINS.items() if name != "openai"}

# Values handed to the export as if given with --secret: none may appear in what it writes.
SECRET_VALUES = {"hf_token": "hf-VALUE-never-written-1f3e", "db_password": "db-VALUE-never-written-9c2a"}


@dataclass(frozen=True)
class Export:
    chain: Chain
    source: Path
    out: Path
    files: list[Path]

    def documents(self, name: str) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all((self.out / name).read_text()) if d is not None]


def export(
    target: str,
    source: Path,
    workdir: Path,
    *,
    out: str = "out",
    registry: str | None = None,
    model_urls: dict[str, str] | None = None,
) -> Export:
    """Export ``source`` from ``workdir`` into the relative ``out``, as a user would."""
    chain = load_chain(source)
    workdir.mkdir(parents=True, exist_ok=True)
    options = options_for(
        target, secrets=dict(SECRET_VALUES), out_dir=Path(out), registry=registry, model_urls=model_urls or {}
    )
    with contextlib.chdir(workdir):
        files = export_target(target).export(chain, source, options)
    return Export(chain, source, workdir / out, [workdir / f for f in files])


@pytest.fixture(scope="session")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Export]:
    root = tmp_path_factory.mktemp("k8s")
    return {
        name: export("kubernetes", path, root / name, registry="registry.example:5000/team")
        for name, path in CHAINS.items()
    }


@pytest.fixture(scope="session")
def compose(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Export]:
    root = tmp_path_factory.mktemp("compose")
    return {name: export("compose", path, root / name) for name, path in CHAINS.items()}


def all_text(directory: Path) -> str:
    """Every file under ``directory`` (generated code included), as one string."""
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(directory.rglob("*")) if p.is_file()
    )


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
