"""What ``import chains`` and a generated chainlet server load, each in a fresh interpreter.

The front door keeps the deploy machinery, the CLI and the HTTP clients out of a process that
does not use them; ``push``, ``run_local`` and ``StubBase`` load on first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import generate_chain, write_chain

# Neither a chain file nor a client needs these to import chains.
NOT_FOR_IMPORT = (
    "aiohttp",
    "chains.cli",
    "chains.deploy",
    "chains.local",
    "chains.progress",
    "chains.stubs",
    "chains.targets",
    "chains.truss_compat.push",
    "chains.ui",
    "click",
    "chains_codegen",
    "docker",
    "httpx",
    "jinja2",
    "opentelemetry",
    "rich",
    "tenacity",
    "yaml",
)

# Serving needs aiohttp (stubs), uvicorn (which itself brings click) and msgpack, but none of
# these: they build, deploy or export chains, make sync calls only, trace (when it is off),
# draw traces, or (starlette) give a closed WebSocket its Truss-compatible exception.
NOT_FOR_SERVING = (
    "chains.cli",
    "chains.deploy",
    "chains.local",
    "chains.progress",
    "chains.targets",
    "chains_codegen",
    "docker",
    "httpx",
    "jinja2",
    "opentelemetry",
    "rich",
    "starlette",
    "yaml",
)


def loaded_after(code: str, cwd: Path | None = None) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def under(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_import_chains_leaves_deploy_cli_and_http_clients_unloaded() -> None:
    modules = loaded_after("import chains")
    assert "chains" in modules and "pydantic" in modules
    assert {name: under(modules, name) for name in NOT_FOR_IMPORT} == {name: [] for name in NOT_FOR_IMPORT}


def test_lazy_names_load_their_module_on_first_use() -> None:
    modules = loaded_after(
        "import chains, chains.truss_compat.push, chains.local, chains.stubs\n"
        # Truss's push, which maps its arguments onto chains.deploy.push.
        "assert chains.push is chains.truss_compat.push.push\n"
        "assert chains.run_local is chains.local.run_local\n"
        "assert chains.StubBase is chains.stubs.StubBase\n"
        "from chains import StubBase, push, run_local\n"
    )
    assert {"chains.deploy", "chains.targets", "chains.local", "chains.stubs"} <= modules


@pytest.mark.parametrize("name", ["push", "run_local", "StubBase"])
def test_each_lazy_name_loads_only_its_own_module(name: str) -> None:
    modules = loaded_after(f"import chains\nchains.{name}")
    module = {"push": "chains.deploy", "run_local": "chains.local", "StubBase": "chains.stubs"}[name]
    assert module in modules
    assert under(modules, "chains.cli") == under(modules, "jinja2") == under(modules, "docker") == []


def test_the_push_machinery_loads_rich_only_to_draw_a_live_view() -> None:
    modules = loaded_after("import chains.targets.local, chains.targets.docker, chains.progress")
    assert under(modules, "rich") == []


def test_every_exported_name_resolves_and_is_listed() -> None:
    import chains

    missing = [name for name in chains.__all__ if not hasattr(chains, name)]
    assert missing == []
    assert set(chains.__all__) <= set(dir(chains))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    import chains

    with pytest.raises(AttributeError, match="no attribute 'Pushh'"):
        _ = chains.Pushh  # type: ignore[attr-defined]


def test_a_generated_server_loads_what_serving_needs_and_nothing_more(tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "src",
        """
        import chains

        class Leaf(chains.ChainletBase):
            async def run_remote(self, text: str) -> str:
                return text.upper()

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            def __init__(self, leaf: Leaf = chains.depends(Leaf)) -> None:
                self._leaf = leaf

            async def run_remote(self, text: str) -> str:
                return await self._leaf.run_remote(text)
        """,
    )
    directories = generate_chain(file, tmp_path / "out")
    # The server module as `python server.py` runs it, short of serving: the app is built.
    code = (
        "import os, runpy\n"
        "os.environ['CHAINS_DEPENDENCY_URLS'] = '{\"Leaf\": [\"http://127.0.0.1:9\"]}'\n"
        "os.environ['CHAINS_INTERNAL_TOKEN'] = 'token'\n"
        "server = runpy.run_path('server.py', run_name='server')\n"
        "assert type(server['app']).__name__ == 'ChainletApp'\n"
    )
    modules = loaded_after(code, cwd=directories["Entry"])
    assert {"chains.server.serve", "chains.stubs", "aiohttp", "uvicorn"} <= modules
    assert {name: under(modules, name) for name in NOT_FOR_SERVING} == {name: [] for name in NOT_FOR_SERVING}
