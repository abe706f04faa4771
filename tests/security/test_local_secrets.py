"""What other users of this machine can read of a chain: its logs, its traces, and the
credentials given to ``chains push``; and stream tickets, which open one chain only.

Each test pushes with the ``chains`` command line, as a user would, and stops what it pushed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chains.targets.state import chain_dir, read_state
from tests.helpers import unique_port, wait_until
from tests.security.conftest import SAMPLE, pushed

SECRET = "s3cret-value-for-the-keeper"
KEY = "argv-test-key-4"


def chains_cli(*args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chains", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "CHAINS_API_KEY"},
    )


@pytest.fixture
def stopped(chains_home: Path) -> Iterator[list[str]]:
    """Names of chains a test pushed; each is stopped at the end."""
    names: list[str] = []
    yield names
    for name in names:
        chains_cli("stop", name, timeout=60)


def push_args(name: str, *more: str) -> list[str]:
    return [
        "push",
        str(SAMPLE),
        "--entrypoint",
        "Keeper",
        "--name",
        name,
        "--port",
        str(unique_port()),
        *more,
    ]


def url_of(name: str) -> str:
    return read_state(name).entrypoint_url


def digest(url: str, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/run_remote", json={}, headers=headers, timeout=20)


def test_credentials_on_the_command_line_are_warned_of(stopped: list[str]) -> None:
    stopped.append("argv-warned")
    pushed_ = chains_cli(*push_args("argv-warned", "--secret", f"token={SECRET}", "--api-key", KEY))
    assert pushed_.returncode == 0, pushed_.stderr
    assert "warning: --api-key on the command line can be read by every user" in pushed_.stderr
    assert "warning: the value of --secret token on the command line" in pushed_.stderr
    assert "CHAINS_API_KEY" in pushed_.stderr and "--api-key-file" in pushed_.stderr
    assert SECRET not in pushed_.stderr + pushed_.stdout and KEY not in pushed_.stderr


def test_credentials_from_a_file_and_a_prompt_stay_off_the_command_line(
    stopped: list[str], tmp_path: Path
) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    stopped.append("argv-free")
    # --watch keeps the command running: its command line is what `ps` shows meanwhile.
    args = push_args("argv-free", "--secret", "token", "--api-key-file", str(key_file), "--watch")
    process = subprocess.Popen(
        [sys.executable, "-m", "chains", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "CHAINS_API_KEY"},
    )
    try:
        assert process.stdin is not None
        process.stdin.write(SECRET + "\n")
        process.stdin.close()
        state = chain_dir("argv-free") / "state.json"
        wait_until(lambda: state.exists() and read_state("argv-free").entrypoint_url, 120, "the push")
        wait_until(lambda: digest(url_of("argv-free"), KEY).status_code == 200, 60, "the chain to answer")
        answer = digest(url_of("argv-free"), KEY)
        assert answer.json() == hashlib.sha256(SECRET.encode()).hexdigest()
        assert digest(url_of("argv-free")).status_code == 401
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert KEY.encode() not in command_line and SECRET.encode() not in command_line
    finally:
        process.terminate()
        process.wait(30)
    assert process.stderr is not None
    err = process.stderr.read()
    assert "warning" not in err, err


def test_a_bad_api_key_file_is_refused_in_one_line(chains_home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for file, says in ((empty, "is empty"), (tmp_path / "missing", "cannot read --api-key-file")):
        refused = chains_cli(
            *push_args("argv-bad", "--secret", "token", "--api-key-file", str(file)), stdin="v\n"
        )
        assert refused.returncode == 1 and says in refused.stderr and "Traceback" not in refused.stderr


def owner_only(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_logs_and_traces_are_owner_only(chains_home: Path) -> None:
    with pushed("FailEntry", "modes") as handle:
        httpx.post(f"{handle.entrypoint_url}/run_remote", json={"x": 1.0}, timeout=20)
        folder = chain_dir("modes")
        store = folder / "traces.sqlite"
        deadline = time.monotonic() + 20
        while not (store.exists() and Path(f"{store}-wal").exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        logs = sorted(folder.rglob("*.log"))
        assert logs and store.exists()
        for path in [*logs, *folder.glob("traces.sqlite*")]:
            assert owner_only(path), f"{path.name} is {oct(path.stat().st_mode)}"


def test_a_stream_ticket_opens_only_its_own_chain(chains_home: Path) -> None:
    with (
        pushed("StreamEntry", "tickets-a", api_key=KEY) as a,
        pushed("StreamEntry", "tickets-b", api_key=KEY) as b,
    ):
        issued = httpx.post(f"{a.entrypoint_url}/stream_ticket", headers={"authorization": f"Bearer {KEY}"})
        ticket = issued.json()["ticket"]
        params = {"start": "1", "chains_ticket": ticket}
        assert httpx.get(f"{a.entrypoint_url}/run_remote", params=params, timeout=20).status_code == 200
        other = httpx.get(f"{b.entrypoint_url}/run_remote", params=params, timeout=20)
        assert other.status_code == 401 and "signature" in other.json()["detail"]


def test_chains_trace_refuses_a_bad_name_in_one_line(chains_home: Path) -> None:
    for name in ("bad/name", "../up", ""):
        refused = chains_cli("trace", name)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
