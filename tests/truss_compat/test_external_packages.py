"""DockerImage(external_package_dirs=...): folders of packages outside the chain's folder are
importable when the chain is checked, copied into each chainlet, and importable wherever it runs.

The project has the chain in app/ and two package folders beside it, libs/ and more_libs/. The
chain file imports textutil (libs/) at its top level; Counter imports numberwords (more_libs/)
only inside its method. Loud answers with the folder two levels above textutil's package: "libs"'s
parent "project" when the original was imported, "packages" when the copy beside the server was.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx

from chains.loader import load_chain
from chains_codegen import generate
from tests.exports.conftest import export
from tests.exports.test_truss import client, isolated, loaded_model
from tests.helpers import Cli

CHAIN = """
from pathlib import Path

import chains
from textutil import shout


class Counter(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        docker_image=chains.DockerImage(external_package_dirs=["../libs", "../more_libs"])
    )

    async def run_remote(self, n: int) -> str:
        import numberwords  # only where Counter runs

        return numberwords.spell(n)


@chains.mark_entrypoint("{name}")
class Loud(chains.ChainletBase):
    remote_config = chains.RemoteConfig(docker_image=chains.DockerImage(external_package_dirs=["../libs"]))

    def __init__(self, counter: Counter = chains.depends(Counter)) -> None:
        self._counter = counter

    async def run_remote(self, n: int) -> dict[str, str]:
        import textutil

        text = shout(await self._counter.run_remote(n))
        return {{"text": text, "from": Path(textutil.__file__).parents[2].name}}
"""


def write_project(root: Path, name: str = "ext-packages") -> Path:
    """The project described above under ``root/project``; the chain file's path."""
    project = root / "project"
    (project / "app").mkdir(parents=True)
    (project / "libs" / "textutil").mkdir(parents=True)
    (project / "libs" / "textutil" / "__init__.py").write_text(
        "def shout(s: str) -> str:\n    return s.upper() + '!'\n"
    )
    (project / "more_libs").mkdir()
    (project / "more_libs" / "numberwords.py").write_text(
        "def spell(n: int) -> str:\n    return ['zero', 'one', 'two', 'three'][n]\n"
    )
    file = project / "app" / "chain.py"
    file.write_text(textwrap.dedent(CHAIN.format(name=name)))
    return file


def test_the_folders_are_copied_into_each_chainlet_and_put_on_its_path(tmp_path: Path) -> None:
    file = write_project(tmp_path)
    first = generate(load_chain(file), file, tmp_path / "out").chainlets
    loud, counter = first["Loud"].directory, first["Counter"].directory
    assert (loud / "packages" / "libs" / "textutil" / "__init__.py").is_file()
    assert not (loud / "packages" / "more_libs").exists()
    assert (counter / "packages" / "more_libs" / "numberwords.py").is_file()
    assert 'str(_HERE / "packages" / "more_libs"),' in (counter / "server.py").read_text()
    dockerfile = (counter / "Dockerfile").read_text()
    assert "COPY --chown=chains:chains packages/ ./packages/" in dockerfile
    assert "ENV PYTHONPATH=/app/packages/libs:/app/packages/more_libs\n" in dockerfile
    # A changed package is a changed chainlet: only those that list its folder.
    (tmp_path / "project" / "more_libs" / "numberwords.py").write_text(
        "def spell(n: int) -> str:\n    return 'many'\n"
    )
    second = generate(load_chain(file), file, tmp_path / "out").chainlets
    assert second["Counter"].code_version != first["Counter"].code_version
    assert second["Loud"].code_version == first["Loud"].code_version


def test_check_imports_the_chain_file_through_the_folders(tmp_path: Path) -> None:
    # `chains check` runs in a fresh process with nothing but the chain's own folder to go by.
    result = Cli(tmp_path / "home").run("check", str(write_project(tmp_path)))
    assert "ok: chain 'ext-packages'" in result.stdout
    assert "external_package_dirs" not in result.stdout + result.stderr


def test_a_missing_folder_imported_at_the_top_names_the_chainlet_and_the_folder(tmp_path: Path) -> None:
    file = write_project(tmp_path)
    (tmp_path / "project" / "libs" / "textutil" / "__init__.py").unlink()
    (tmp_path / "project" / "libs" / "textutil").rmdir()
    (tmp_path / "project" / "libs").rmdir()
    result = Cli(tmp_path / "home").run("check", str(file), check=False)
    assert result.returncode == 1
    assert (
        "chainlet Counter: DockerImage(external_package_dirs=[...]) names '../libs', which is not a folder"
        in (result.stderr)
    )
    assert "chainlet Loud: DockerImage(external_package_dirs=[...]) names '../libs'" in result.stderr
    assert "No module named 'textutil'" in result.stderr  # the import failure it explains
    assert "Traceback" not in result.stderr


def test_a_missing_folder_imported_later_names_the_chainlet_and_the_folder(tmp_path: Path) -> None:
    file = write_project(tmp_path)
    (tmp_path / "project" / "more_libs" / "numberwords.py").unlink()
    (tmp_path / "project" / "more_libs").rmdir()
    result = Cli(tmp_path / "home").run(
        "push", str(file), "--dry-run", "--out", str(tmp_path / "out"), check=False
    )
    assert result.returncode == 1
    assert (
        "(Counter): chainlet Counter: DockerImage(external_package_dirs=[...]) names '../more_libs', "
        "which is not a folder" in result.stderr
    )
    assert "Loud" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_pushed_chain_imports_from_the_copies(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(write_project(tmp_path)))
    try:
        answer = httpx.post(pushed["entrypoint_url"] + "/run_remote", json={"n": 3}, timeout=30)
    finally:
        cli.run("stop", "ext-packages", check=False)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"text": "THREE!", "from": "packages"}


async def test_the_truss_export_imports_from_the_copies(tmp_path: Path) -> None:
    exported = export("truss", write_project(tmp_path), tmp_path / "work")
    with isolated():
        # Exporting imported the chain file: leave only the export's copies to import from.
        sys.path[:] = [p for p in sys.path if not p.startswith(str(tmp_path / "project"))]
        for name in ("textutil", "numberwords"):
            sys.modules.pop(name, None)
        model = await loaded_model(exported.out / "Counter", secrets={})
        async with client(model) as http:
            answer = await http.post("/predict", json={"n": 1})
        assert answer.status_code == 200 and answer.json() == "one"
        imported = Path(str(sys.modules["numberwords"].__file__))
        assert imported.parents[1] == exported.out / "Counter" / "data" / "chainlet" / "packages"


def test_push_watch_replaces_the_chainlet_whose_package_changed(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    file = write_project(tmp_path, name="ext-watched")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "chains", "push", str(file), "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli.env,
    )
    try:
        assert watcher.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout], daemon=True).start()

        def line_starting(prefix: str, timeout: float = 120) -> str:
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                with contextlib.suppress(queue.Empty):
                    line = lines.get(timeout=left)
                    if line.startswith(prefix):
                        return line
            return f"(no line starting {prefix!r} within {timeout} s)"

        started = line_starting("watching")
        assert str(tmp_path / "project" / "more_libs") in started, started
        url = str(cli.state("ext-watched")["entrypoint_url"]) + "/run_remote"
        assert httpx.post(url, json={"n": 1}, timeout=30).json()["text"] == "ONE!"
        numbers = tmp_path / "project" / "more_libs" / "numberwords.py"
        numbers.write_text(numbers.read_text().replace("'one'", "'uno'"))
        report = line_starting("[watch]")
        assert "replaced Counter" in report and "Loud" not in report, report
        # The old process answers on the connections it already had until it has drained them.
        answers = []
        for _ in range(50):
            answers.append(httpx.post(url, json={"n": 1}, timeout=30).json()["text"])
            if answers[-1] == "UNO!":
                break
            time.sleep(0.2)
        assert answers[-1] == "UNO!" and set(answers) <= {"ONE!", "UNO!"}, answers
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(30)
