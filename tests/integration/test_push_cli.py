"""`chains push` to local processes, through the real command line."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.targets.state import pid_alive
from tests.helpers import Cli, wait_until, write_chain

ROOT = Path(__file__).parents[2]
HELLO = ROOT / "examples" / "hello" / "chain.py"
STREAMING = ROOT / "examples" / "streaming" / "chain.py"


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    tool = Cli(tmp_path / "home")
    yield tool
    # Whatever a test left running is stopped, and must stop.
    for state_file in tool.home.glob("*/state.json"):
        tool.run("stop", state_file.parent.name, check=False)


def test_push_status_call_logs_stop(cli: Cli) -> None:
    pushed = cli.push(str(HELLO))
    assert pushed["name"] == "hello" and pushed["target"] == "local"
    url = str(pushed["entrypoint_url"])
    assert url.startswith("http://127.0.0.1:")
    assert set(pushed["chainlets"]) == {"Hello", "Greeter"}  # type: ignore[arg-type]

    status = cli.run("status", "hello").stdout
    assert "Greeter" in status and "ready" in status and "RESTARTS" in status
    assert "hello  running  2/2 ready" in cli.run("status").stdout

    out = cli.run("call", "hello", "--json", '{"names": ["Ada", "Grace"]}').stdout
    assert json.loads(out) == ["Hello, Ada!", "Hello, Grace!"]
    direct = httpx.post(url + "/run_remote", json={"names": ["Bo"]})
    assert direct.json() == ["Hello, Bo!"]

    logs = cli.run("logs", "hello", "Greeter").stdout
    assert "chainlet Greeter is ready" in logs
    state = cli.state("hello")
    pids = [p["pid"] for p in state["processes"]]  # type: ignore[index,union-attr]
    stopped = cli.run("stop", "hello").stdout
    assert "stopped chain 'hello'" in stopped
    assert not any(pid_alive(pid) for pid in [*pids, state["local"]["supervisor_pid"]])  # type: ignore[operator]
    gone = cli.run("status", "hello", check=False)
    assert gone.returncode == 1 and "no chain named 'hello'" in gone.stderr


def test_human_output_has_a_table_and_a_working_curl_line(cli: Cli) -> None:
    out = cli.run("push", str(HELLO)).stdout
    assert "CHAINLET" in out and "Greeter" in out
    curl = next(line for line in out.splitlines() if line.startswith("try: curl"))
    result = subprocess.run(
        curl.removeprefix("try: "), shell=True, capture_output=True, text=True, timeout=30
    )
    assert json.loads(result.stdout) == ["Hello, hello!"]


def test_streams_print_as_they_arrive(cli: Cli) -> None:
    cli.push(str(STREAMING))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chains",
            "call",
            "streaming",
            "--json",
            '{"prompt": "one two three", "max_tokens": 3}',
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=cli.env,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    rest = process.stdout.read()
    assert process.wait(30) == 0
    assert first.startswith("[3 tokens for 'one two three'] one two three")
    assert rest.strip() == '[usage: 3 tokens; {"tokens":3}]'


def test_a_chainlet_failing_in_init_fails_the_push_and_leaves_nothing(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "bad",
        """
        import chains

        class Broken(chains.ChainletBase):
            def __init__(self) -> None:
                raise RuntimeError("cannot load the model weights")

            async def run_remote(self) -> str:
                return "never"

        @chains.mark_entrypoint("bad")
        class Entry(chains.ChainletBase):
            def __init__(self, broken: Broken = chains.depends(Broken)) -> None:
                self._broken = broken

            async def run_remote(self) -> str:
                return await self._broken.run_remote()
    """,
    )
    result = cli.run("push", str(file), check=False)
    assert result.returncode == 1
    # The cause leads, at the user's own line; the tail shows the user's file, not the copy.
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert error == (
        "error: chainlet Broken failed to start: RuntimeError: cannot load the model weights "
        "(chain.py, line 6, in __init__)"
    )
    assert f'File "{file}", line 6, in __init__' in result.stderr
    assert "generated/" not in result.stderr and "Shutting down" not in result.stderr
    assert cli.run("status").stdout.startswith("no chains are running")
    leftovers = subprocess.run(["pgrep", "-f", str(cli.home)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""


def test_an_import_error_fails_the_push(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "imp",
        """
        import chains
        import a_module_that_does_not_exist

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> str:
                return "x"
    """,
    )
    result = cli.run("push", str(file), check=False)
    assert result.returncode == 1 and "No module named 'a_module_that_does_not_exist'" in result.stderr


def test_missing_secret_names_it_and_given_secrets_arrive(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "sec",
        """
        import chains

        @chains.mark_entrypoint("sec")
        class Entry(chains.ChainletBase):
            remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["api_token"]))

            def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
                self._token = context.secrets["api_token"]

            async def run_remote(self) -> int:
                return len(self._token)
    """,
    )
    missing = cli.run("push", str(file), check=False)
    assert missing.returncode == 1 and "missing secret 'api_token' (chainlet Entry)" in missing.stderr
    cli.push(str(file), "--secret", "api_token=12345")
    assert cli.run("call", "sec").stdout.strip() == "5"
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text("# local secrets\napi_token='abc'\n")
    cli.push(str(file), "--secrets-file", str(secrets_file))
    assert cli.run("call", "sec").stdout.strip() == "3"
    assert "12345" not in cli.run("status", "sec", "--json").stdout


def test_kill_9_of_a_chainlet_is_restarted_and_calls_keep_working(cli: Cli) -> None:
    cli.push(str(HELLO), "--name", "hello-kill")
    state = cli.state("hello-kill")
    greeter = next(p for p in state["processes"] if p["chainlet"] == "Greeter")  # type: ignore[union-attr]
    os.kill(greeter["pid"], signal.SIGKILL)
    out = cli.run("call", "hello-kill", "--json", '{"names": ["Ada"]}').stdout
    assert json.loads(out) == ["Hello, Ada!"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        again = next(p for p in cli.state("hello-kill")["processes"] if p["chainlet"] == "Greeter")  # type: ignore[union-attr]
        if again["restarts"] == 1 and again["state"] == "ready":
            break
        time.sleep(0.1)
    assert again["restarts"] == 1 and again["pid"] != greeter["pid"]
    assert "1" in [
        line.split()[4] for line in cli.run("status", "hello-kill").stdout.splitlines() if "Greeter" in line
    ]


def test_pushing_again_replaces_the_chain_on_the_same_url(cli: Cli) -> None:
    first = cli.push(str(HELLO), "--name", "hello-again")
    old_pids = [p["pid"] for p in cli.state("hello-again")["processes"]]  # type: ignore[union-attr]
    second = cli.push(str(HELLO), "--name", "hello-again")
    assert second["entrypoint_url"] == first["entrypoint_url"]
    assert not any(pid_alive(pid) for pid in old_pids)
    assert httpx.post(str(second["entrypoint_url"]) + "/run_remote", json={"names": ["X"]}).json() == [
        "Hello, X!"
    ]


def test_unknown_and_stale_chains_get_clear_messages(cli: Cli) -> None:
    unknown = cli.run("call", "nope", check=False)
    assert (
        unknown.returncode == 1
        and "no chain named 'nope'" in unknown.stderr
        and "Traceback" not in unknown.stderr
    )
    cli.push(str(HELLO), "--name", "hello-stale")
    state = cli.state("hello-stale")
    os.kill(state["local"]["supervisor_pid"], signal.SIGKILL)  # type: ignore[arg-type]
    wait_until(lambda: not pid_alive(state["local"]["supervisor_pid"]), 10, "the supervisor gone")  # type: ignore[arg-type]
    assert "stale" in cli.run("status", "hello-stale").stderr
    assert "stale" in cli.run("call", "hello-stale", check=False).stderr
    cli.run("stop", "hello-stale")
    assert not any(pid_alive(p["pid"]) for p in state["processes"])  # type: ignore[union-attr]


def test_dry_run_generates_and_starts_nothing(cli: Cli) -> None:
    out = cli.run("push", str(HELLO), "--dry-run").stdout
    assert "dry run" in out and "nothing started" in out
    assert (cli.home / "hello" / "dry-run" / "Greeter" / "server.py").exists()
    assert cli.run("status").stdout.startswith("no chains are running")


def test_replicas_get_their_own_processes_and_urls(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "rep",
        """
        import os
        import asyncio

        import chains

        class Worker(chains.ChainletBase):
            remote_config = chains.RemoteConfig(compute=chains.Compute(replicas=2))

            async def run_remote(self) -> str:
                return os.environ["CHAINS_REPLICA"]

        @chains.mark_entrypoint("rep")
        class Entry(chains.ChainletBase):
            def __init__(self, worker: Worker = chains.depends(Worker)) -> None:
                self._worker = worker

            async def run_remote(self, n: int) -> list[str]:
                return sorted(set(await asyncio.gather(*(self._worker.run_remote() for _ in range(n)))))
    """,
    )
    pushed = cli.push(str(file))
    assert len(pushed["chainlets"]["Worker"]) == 2  # type: ignore[index]
    assert json.loads(cli.run("call", "rep", "--json", '{"n": 8}').stdout) == ["0", "1"]


def test_watch_replaces_only_the_changed_chainlet_while_calls_succeed(cli: Cli, tmp_path: Path) -> None:
    source = """
        import chains

        class Greeter(chains.ChainletBase):
            async def run_remote(self, name: str) -> str:
                return "GREETING, " + name

        @chains.mark_entrypoint("watched")
        class Entry(chains.ChainletBase):
            def __init__(self, greeter: Greeter = chains.depends(Greeter)) -> None:
                self._greeter = greeter

            async def run_remote(self, name: str) -> str:
                return await self._greeter.run_remote(name)
    """
    file = write_chain(tmp_path / "watch", source.replace("GREETING", "Hello"))
    watcher = subprocess.Popen(
        [sys.executable, "-m", "chains", "push", str(file), "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli.env,
    )
    try:
        assert watcher.stdout is not None
        lines = iter(watcher.stdout.readline, "")
        for line in lines:
            if line.startswith("watching"):
                break
        state = cli.state("watched")
        url = str(state["entrypoint_url"])
        entry_pid = next(p["pid"] for p in state["processes"] if p["chainlet"] == "Entry")  # type: ignore[union-attr]
        answers: list[str] = []
        failures: list[str] = []
        done = threading.Event()

        def keep_calling() -> None:
            with httpx.Client(timeout=10) as client:
                while not done.is_set():
                    try:
                        response = client.post(url + "/run_remote", json={"name": "Ada"})
                        (answers if response.status_code == 200 else failures).append(response.text)
                    except httpx.HTTPError as exc:
                        failures.append(repr(exc))
                    time.sleep(0.02)

        caller = threading.Thread(target=keep_calling)
        caller.start()
        wait_until(lambda: bool(answers or failures), 10, "the caller's first answer")
        file.write_text(file.read_text().replace("Hello", "Howdy"))
        for line in lines:
            if line.startswith("[watch]"):
                assert "replaced Greeter" in line, line
                break
        wait_until(lambda: bool(failures) or answers[-1] == '"Howdy, Ada"', 10, "an answer of the new code")
        done.set()
        caller.join(10)
        assert failures == []
        assert answers[0] == '"Hello, Ada"' and answers[-1] == '"Howdy, Ada"'
        after = cli.state("watched")
        assert next(p["pid"] for p in after["processes"] if p["chainlet"] == "Entry") == entry_pid  # type: ignore[union-attr]
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(30)


def _watch_reports(watcher: subprocess.Popen[str]) -> queue.Queue[str]:
    """The ``[watch]`` lines of a running ``push --watch``, as they come."""
    reports: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            if line.startswith(("[watch]", "watching")):
                reports.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return reports


def test_one_editor_save_is_one_watch_report(cli: Cli, tmp_path: Path) -> None:
    """A save as editors make it (a swap file beside the file, a backup, the file truncated then
    written, the swap file written again) is reported once, and reloads only the chainlet whose
    code changed; a save that changes nothing is not reported at all."""
    source = """
        import chains

        class Greeter(chains.ChainletBase):
            async def run_remote(self, name: str) -> str:
                return "Hello, " + name

        @chains.mark_entrypoint("saved")
        class Entry(chains.ChainletBase):
            def __init__(self, greeter: Greeter = chains.depends(Greeter)) -> None:
                self._greeter = greeter

            async def run_remote(self, name: str) -> str:
                return await self._greeter.run_remote(name) + "!"
    """
    file = write_chain(tmp_path / "saved", source)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "chains", "push", str(file), "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli.env,
    )
    try:
        reports = _watch_reports(watcher)
        assert reports.get(timeout=120).startswith("watching")
        swap, backup = file.parent / ".chain.py.swp", file.parent / "chain.py~"
        swap.write_bytes(b"b0VIM 9.0\0")  # the editor opens the file
        time.sleep(0.5)
        backup.write_text(file.read_text())
        edited = file.read_text().replace("Hello", "Howdy")
        with file.open("w") as out:  # truncated, then written in two parts
            out.write(edited[:40])
            out.flush()
            time.sleep(0.1)
            out.write(edited[40:])
        backup.unlink()
        time.sleep(1.0)
        swap.write_bytes(b"b0VIM 9.0\0\1")  # and keeps its swap file up to date
        assert reports.get(timeout=120) == "[watch] change seen: replaced Greeter"
        file.write_text(file.read_text())  # saved again, unchanged
        time.sleep(1.0)
        file.write_text(file.read_text().replace('"!"', '"?"'))
        # The next report is this edit's: neither save above was reported a second time.
        assert reports.get(timeout=120) == "[watch] change seen: replaced Entry"
        assert json.loads(cli.run("call", "saved", "--json", '{"name": "Ada"}').stdout) == "Howdy, Ada?"
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(30)


def test_an_api_key_guards_the_entrypoint(cli: Cli) -> None:
    pushed = cli.push(str(HELLO), "--name", "hello-key", "--api-key", "s3cret-key")
    url = str(pushed["entrypoint_url"]) + "/run_remote"
    assert httpx.post(url, json={"names": ["A"]}).status_code == 401
    assert httpx.post(url, json={"names": ["A"]}, headers={"authorization": "Bearer nope"}).status_code == 401
    ok = httpx.post(url, json={"names": ["A"]}, headers={"authorization": "Bearer s3cret-key"})
    assert ok.json() == ["Hello, A!"]
    refused = cli.run("call", "hello-key", "--json", '{"names": ["A"]}', check=False)
    assert refused.returncode == 1 and "401" in refused.stderr
    env_call = subprocess.run(
        [sys.executable, "-m", "chains", "call", "hello-key", "--json", '{"names": ["B"]}'],
        capture_output=True,
        text=True,
        env={**cli.env, "CHAINS_API_KEY": "s3cret-key"},
        timeout=60,
    )
    assert json.loads(env_call.stdout) == ["Hello, B!"]
    assert "s3cret-key" not in cli.run("status", "hello-key", "--json").stdout


def test_logs_show_a_call_that_failed_in_the_users_file(cli: Cli, tmp_path: Path) -> None:
    file = write_chain(
        tmp_path / "oops",
        """
        import chains

        @chains.mark_entrypoint("oops")
        class Oops(chains.ChainletBase):
            async def run_remote(self, x: int) -> int:
                return 1 // x
    """,
    )
    url = str(cli.push(str(file))["entrypoint_url"])
    assert httpx.post(url + "/run_remote", json={"x": 0}, timeout=30).status_code == 500
    logs = cli.run("logs", "oops").stdout
    assert f'File "{file}", line 7, in run_remote' in logs
    assert "generated/" not in logs
