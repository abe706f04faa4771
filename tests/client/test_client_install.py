"""The generated client's README: its install lines, run as written in a fresh virtual
environment, install a client that imports, whether or not this chains version is released."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chains_codegen.clientgen import sdk_requirement
from tests.client.conftest import ROOT, STREAMING, Venv


def test_the_readme_install_lines_work_from_a_checkout(tmp_path: Path) -> None:
    out = tmp_path / "client"
    made = subprocess.run(
        [sys.executable, "-m", "chains", "client", str(STREAMING), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    readme = (out / "README.md").read_text()
    block = re.search(r"From this\nfolder:\n\n```\n(.*?)```", readme, re.S)
    assert block is not None, readme
    lines = block.group(1).splitlines()
    # This test runs on a checkout (an editable install): the line names it, not the index,
    # where this version may not be.
    assert lines[-1] == f"pip install --no-deps {shlex.quote(str(ROOT))} ."
    assert sdk_requirement() == shlex.quote(str(ROOT))

    venv = Venv(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv.folder)], check=True, timeout=300)
    for line in lines:
        words = shlex.split(line)
        assert words[:2] == ["pip", "install"], line
        result = subprocess.run(
            [str(venv.python), "-m", *words, "--quiet", "--disable-pip-version-check"],
            cwd=out,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"{line}\n{result.stderr}"
    package = next(p.name for p in out.iterdir() if p.name.endswith("_client"))
    imported = venv.run("-c", f"import {package}; print({package}.Client.__name__)", cwd=tmp_path)
    assert imported.stdout.strip() == "Client", imported.stderr


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        (None, "chains-sdk=={version}"),
        ('{"url": "https://example.org/chains_sdk.whl", "archive_info": {}}', "chains-sdk=={version}"),
        ('{"url": "file:///no/such/folder", "dir_info": {}}', "chains-sdk=={version}"),
        ('{"url": "file://{wheel}", "archive_info": {}}', "{wheel}"),
        ("not json", "chains-sdk=={version}"),
    ],
    ids=["from-the-index", "from-a-url", "gone-folder", "local-wheel", "unreadable"],
)
def test_the_requirement_follows_where_chains_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recorded: str | None, expected: str
) -> None:
    # Where pip installed chains from is read from its record; the record is what varies here.
    import importlib.metadata

    from chains_codegen import clientgen

    wheel = tmp_path / "chains_sdk-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")

    class Installed:
        def read_text(self, name: str) -> str | None:
            assert name == "direct_url.json"
            return None if recorded is None else recorded.replace("{wheel}", str(wheel))

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    want = expected.replace("{version}", clientgen.GENERATOR_VERSION).replace("{wheel}", str(wheel))
    assert clientgen.sdk_requirement() == want
