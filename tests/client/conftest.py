"""A consumer's virtual environment, made once per session: pydantic and httpx from the
package index, and the chains package itself without its dependencies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.nginx import Nginx, Site, nginx_binary

ROOT = Path(__file__).parents[2]
KINDS = Path(__file__).with_name("kinds_chain.py")
STREAMING = ROOT / "examples" / "streaming" / "chain.py"
KEY = "consumer-key-1"


class Venv:
    """A virtual environment of the test's own; ``python`` runs in it, ``install`` adds to it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.python = folder / "bin" / "python"

    def install(self, *args: str) -> None:
        command = [str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, f"pip install {' '.join(args)} failed:\n{result.stderr}"

    def run(
        self, *args: str, timeout: float = 120, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
        )

    def packages(self) -> set[str]:
        listed = self.run("-m", "pip", "list", "--format=freeze", "--disable-pip-version-check")
        return {line.split("==")[0].lower() for line in listed.stdout.split()}


@pytest.fixture(scope="session")
def consumer_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    folder = tmp_path_factory.mktemp("consumer") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    venv = Venv(folder)
    venv.install("pydantic>=2.6,<3", "httpx>=0.27,<1")
    venv.install("--no-deps", str(ROOT))
    yield venv


@pytest.fixture(scope="session")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Each kind's chain pushed with the local target, and nginx in front of the slow one."""
    folder = tmp_path_factory.mktemp("kinds")
    cli = Cli(folder / "home")
    nginx: Nginx | None = None
    try:
        found: dict[str, str] = {}
        for name in ("Unary", "Items", "Structured", "Bytes", "Events", "Slow"):
            pushed = cli.push(
                str(KINDS), "--entrypoint", name, "--name", f"kinds-{name.lower()}", "--api-key", KEY
            )
            found[name] = str(pushed["entrypoint_url"])
        found["Text"] = str(
            cli.push(str(STREAMING), "--name", "kinds-text", "--api-key", KEY)["entrypoint_url"]
        )
        # The proxy gives up on an upstream silent for a second: the slow stream is cut mid-way.
        site = Site("cut", found["Slow"], ["proxy_buffering off;", "proxy_read_timeout 1s;"])
        nginx = Nginx(nginx_binary(), folder / "nginx", [site]).start()
        found["Cut"] = site.url
        yield found
    finally:
        if nginx is not None:
            nginx.stop()
        for state_file in cli.home.glob("*/state.json"):
            cli.run("stop", state_file.parent.name, check=False)
