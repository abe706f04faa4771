"""Access: internal chainlets answer only callers holding the chain's token, and the token
stays secret: never in logs, `chains status`, error details, metrics or command lines, and
every file holding it readable by its owner only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chains.targets.state import chain_dir, read_state
from chains.targets.supervisor import control_socket_path
from tests.reliability.conftest import SAMPLE, cli, pushed, record, token_of

CHAIN = "vault"
OTHER = "vault-other"


@pytest.fixture(scope="module")
def chains_pushed(chains_home: Path) -> Iterator[dict[str, str]]:
    """The chain under test, pushed through the command line (its output is checked too), and
    a second chain of the same code, whose token must not open the first one."""
    pushed_out = cli("push", str(SAMPLE), "--entrypoint", "VaultEntry", "--name", CHAIN, timeout=120)
    assert pushed_out.returncode == 0, pushed_out.stderr
    json_out = cli("push", str(SAMPLE), "--entrypoint", "VaultEntry", "--name", CHAIN, "--json", timeout=120)
    assert json_out.returncode == 0, json_out.stderr
    try:
        with pushed("VaultEntry", OTHER):
            yield {
                "push": pushed_out.stdout + pushed_out.stderr,
                "push --json": json_out.stdout + json_out.stderr,
            }
    finally:
        cli("stop", CHAIN)


def vault_url(chain: str) -> str:
    (vault,) = read_state(chain).replicas("Vault")
    return vault.url + "/run_remote"


def call(url: str, headers: dict[str, str], body: object = None) -> httpx.Response:
    return httpx.post(url, json=body if body is not None else {"key": "k"}, headers=headers, timeout=10)


def test_an_internal_chainlet_answers_only_with_its_chains_token(chains_pushed: dict[str, str]) -> None:
    url = vault_url(CHAIN)
    token, other = token_of(CHAIN), token_of(OTHER)
    assert token != other
    refused = {
        "no credentials": {},
        "empty bearer": {"authorization": "Bearer"},
        "wrong token": {"authorization": "Bearer not-the-token"},
        "another chain's token": {"authorization": f"Bearer {other}"},
        "the token truncated": {"authorization": f"Bearer {token[:-1]}"},
        "the token extended": {"authorization": f"Bearer {token}x"},
        "the token in another scheme": {"authorization": f"Basic {token}"},
        "the token as a bare header": {"authorization": token},
        "the token as an API key": {"x-api-key": token},
    }
    statuses = {}
    for what, headers in refused.items():
        response = call(url, headers)
        statuses[what] = response.status_code
        assert response.status_code == 401, (what, response.status_code, response.text)
        assert response.json()["detail"] and token not in response.text
    ok = call(url, {"authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and ok.json() == "K"
    # The other chain's vault is just as closed to this chain's token.
    assert call(vault_url(OTHER), {"authorization": f"Bearer {token}"}).status_code == 401
    # The entrypoint, which is public, reaches its vault with the token it holds.
    entry = read_state(CHAIN).entrypoint_url + "/run_remote"
    assert httpx.post(entry, json={"key": "abc"}, timeout=10).json() == "ABC"
    record("access_token_checks", refused=statuses, accepted_with_token=200)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=80))
def test_no_guessed_credential_opens_an_internal_chainlet(chains_pushed: dict[str, str], guess: str) -> None:
    for headers in ({"authorization": f"Bearer {guess}"}, {"authorization": guess}, {"x-api-key": guess}):
        assert call(vault_url(CHAIN), headers).status_code == 401


def test_the_token_is_nowhere_but_in_owner_only_files(
    chains_pushed: dict[str, str], chains_home: Path
) -> None:
    token = token_of(CHAIN)
    state = read_state(CHAIN)
    entry = state.entrypoint_url
    # Give every place the token could leak into something to show: calls that succeed, that
    # fail two hops deep, that are refused, with bad arguments.
    with httpx.Client(timeout=10) as client:
        assert client.post(entry + "/run_remote", json={"key": "a"}).status_code == 200
        failed = client.post(entry + "/run_remote", json={"key": "missing", "fail": True})
        assert failed.status_code == 500 and "KeyError" in failed.text
        assert client.post(entry + "/run_remote", json={"key": 1}).status_code == 422
        assert client.post(vault_url(CHAIN), json={"key": "a"}).status_code == 401
        pages = {
            f"{p.chainlet} {path}": client.get(p.url + path).text
            for p in state.processes
            for path in ("/metrics", "/openapi.json", "/healthz", "/readyz")
        }
    called = cli("call", CHAIN, "--json", '{"key": "x", "fail": true}')
    assert called.returncode == 1 and "KeyError" in called.stderr, called.stderr
    shown = {
        **chains_pushed,
        "status": cli("status").stdout,
        "status NAME": cli("status", CHAIN).stdout,
        "status NAME --json": cli("status", CHAIN, "--json").stdout,
        "logs NAME": cli("logs", CHAIN).stdout,
        "call NAME (error)": called.stdout + called.stderr,
        "error detail, two hops": failed.text,
        **pages,
    }
    for pid in [state.local.supervisor_pid, *(p.pid for p in state.processes if p.pid)]:
        shown[f"command line of {pid}"] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    leaks = [where for where, text in shown.items() if token in text]
    assert leaks == [], leaks
    assert "KeyError" in shown["error detail, two hops"]  # the detail was there to look at

    # Every file under the chain's folder: which hold the token, and who may read them.
    holding, loose = [], []
    for path in sorted(chain_dir(CHAIN).rglob("*")):
        if path.is_file() and not path.is_symlink() and token.encode() in path.read_bytes():
            holding.append(path.relative_to(chain_dir(CHAIN)).as_posix())
            if stat.S_IMODE(path.stat().st_mode) & 0o077:
                loose.append(f"{path.name}: {oct(stat.S_IMODE(path.stat().st_mode))}")
    assert [h.rsplit("/", 1)[-1] for h in holding] == ["deployment.json"], holding
    assert loose == [], loose
    state_file = chain_dir(CHAIN) / "deployments" / state.deployment / "state.json"
    modes = {
        "deployment.json": oct(stat.S_IMODE((state_file.parent / "deployment.json").stat().st_mode)),
        "state.json": oct(stat.S_IMODE(state_file.stat().st_mode)),
    }
    assert modes == {"deployment.json": "0o600", "state.json": "0o600"}, modes
    # The supervisor's control socket (it can replace chainlets): owner only, in an owner-only folder.
    control = control_socket_path(state_file.parent)
    assert stat.S_IMODE(control.stat().st_mode) & 0o077 == 0
    assert (
        stat.S_IMODE(control.parent.stat().st_mode) == 0o700 and control.parent.stat().st_uid == os.getuid()
    )
    logs = sum(1 for p in chain_dir(CHAIN).rglob("*.log"))
    record(
        "access_token_secrecy",
        places_checked=sorted(shown),
        places_with_token=leaks,
        files_holding_token=holding,
        modes=modes,
        log_files_checked=logs,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder owned by someone else")
def test_a_control_folder_prepared_by_another_user_is_refused(tmp_path: Path) -> None:
    """Another local user who creates the supervisors' control folder first (it is named after
    our uid, in a shared temp dir) would own the sockets the CLI talks to."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o755)
    planted = runtime / f"chains-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)
    os.chown(planted, 65534, 65534)  # nobody
    code = (
        "import sys; from pathlib import Path; from chains.targets.supervisor import control_socket_path\n"
        "try:\n    control_socket_path(Path('x'))\nexcept Exception as exc:\n"
        "    print(type(exc).__name__, exc); sys.exit(3)\n"
    )
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 3, result.stdout + result.stderr
    assert str(planted) in result.stdout and "owned by" in result.stdout, result.stdout
    # A folder of our own that others may enter is made owner-only again.
    os.chown(planted, os.getuid(), os.getgid())
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert stat.S_IMODE(planted.stat().st_mode) == 0o700
