"""DockerImage(external_package_dirs=...) on a real engine: the folders are copied into each
chainlet's image, and its server imports from them there (tests/truss_compat has the rest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker.conftest import Cli, remove_chain
from tests.truss_compat.test_external_packages import write_project

pytestmark = pytest.mark.docker


def test_each_image_holds_the_folders_and_imports_from_them(engine: Any, cli: Cli, tmp_path: Path) -> None:
    file = write_project(tmp_path, name="dk-ext-packages")
    try:
        pushed = cli.push(str(file))
        answer = httpx.post(pushed["entrypoint_url"] + "/run_remote", json={"n": 2}, timeout=30)
        assert answer.status_code == 200, answer.text
        # "packages": textutil came from the image's copy, not from the project's folder.
        assert answer.json() == {"text": "TWO!", "from": "packages"}
        (counter,) = engine.containers({"chains.chain": "dk-ext-packages", "chains.chainlet": "Counter"})
        found = counter.exec_run(
            ["python", "-c", "import numberwords, textutil; print(numberwords.__file__)"]
        )
        # PYTHONPATH holds the folders for any Python started in the container, not only the server.
        assert found.exit_code == 0, found.output
        assert found.output.decode().strip() == "/app/packages/more_libs/numberwords.py"
    finally:
        cli.run("stop", "dk-ext-packages", check=False)
        remove_chain(engine, "dk-ext-packages")
