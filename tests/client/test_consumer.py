"""``chains.client`` in a consumer's environment with only pydantic and httpx: every kind of
output read from pushed chains, sync and async, and a stream cut by a proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.client.conftest import KEY, Venv

HERE = Path(__file__).parent
# What examples/streaming's entrypoint streams for prompt="hello there", max_tokens=3.
TEXT = "[3 tokens for 'hello there'] hello there hello\n[usage: 3 tokens; {\"tokens\":3}]"
# What chains.client may load besides the standard library: pydantic, httpx and theirs.
ALLOWED = {
    "__main__",
    "chains",
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "typing_inspection",
    "annotated_types",
    "httpx",
    "httpcore",
    "anyio",
    "sniffio",
    "h11",
    "idna",
    "certifi",
    "_distutils_hack",
    "_sysconfigdata__linux_x86_64-linux-gnu",
}


def test_the_client_imports_with_only_pydantic_and_httpx(consumer_venv: Venv) -> None:
    installed = consumer_venv.packages()
    assert not installed & {"aiohttp", "click", "jinja2", "tenacity", "msgpack", "uvicorn", "pyyaml"}
    probe = consumer_venv.run(
        "-c",
        "import chains.client, chains.errors, json, sys; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names))))",
    )
    assert probe.returncode == 0, probe.stderr
    assert set(json.loads(probe.stdout)) <= ALLOWED


def test_every_kind_read_sync_and_async_and_a_cut_is_interrupted(
    consumer_venv: Venv, urls: dict[str, str]
) -> None:
    result = consumer_venv.run(str(HERE / "consume.py"), json.dumps(urls), KEY, timeout=180, cwd=HERE.parent)
    assert result.returncode == 0, result.stderr
    read: dict[str, Any] = json.loads(result.stdout)
    assert set(read["modules"]) <= ALLOWED
    _check_every_kind(read)


def test_with_aiohttp_installed_the_async_client_reads_every_kind_through_it(urls: dict[str, str]) -> None:
    """The fast path (docs/clients.md): the same reads, in this environment, which has aiohttp."""
    result = subprocess.run(
        [sys.executable, str(HERE / "consume.py"), json.dumps(urls), KEY],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=HERE.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    read: dict[str, Any] = json.loads(result.stdout)
    assert "aiohttp" in read["modules"]  # the asynchronous half went through it
    _check_every_kind(read)


def _check_every_kind(read: dict[str, Any]) -> None:
    expected_bytes = bytes(i % 256 for i in range(1000)).hex()
    for mode in ("sync", "async"):
        got = read[mode]
        assert got["unary"] == [["a", "b", "c"], "c b a"]
        assert got["unary_error"] == ["RemoteValueError", True, "refusing 'x'"]
        assert got["items"] == [["one", 0], ["two", 1], ["three", 2]]
        assert got["structured"] == ["x y", ["x", "y"], 2]
        assert got["text"] == TEXT
        assert got["bytes"] == expected_bytes
        assert got["sse"] == [["tick", "line 0\nsecond line", "0"], ["tick", "line 1\nsecond line", "1"]]
        # The proxy cut the stream in its pause, more than once: the client read it on each time,
        # from where it stopped, and got the rest of the same run.
        pieces, error = got["cut"]
        assert error is None, error
        assert pieces == ["piece 0;", "piece 1;", "piece 2;", "after the pause"]


def test_a_wrong_api_key_is_refused_with_a_clear_error(consumer_venv: Venv, urls: dict[str, str]) -> None:
    script = (
        "import sys\n"
        "from chains.client import Client\n"
        "from chains.errors import ChainsRuntimeError\n"
        "try:\n"
        "    Client(sys.argv[1], api_key='wrong').call(text='a')\n"
        "except ChainsRuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = consumer_venv.run("-c", script, urls["Unary"])
    assert result.returncode == 0, result.stderr
    assert "401" in result.stdout and "api_key" in result.stdout
