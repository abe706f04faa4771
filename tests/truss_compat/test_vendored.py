"""Truss Chains' own example and test chains, changed only in their imports (see vendored/README.md):
checked, run with ``run_local`` for the results Truss's own tests expect, and pushed as local
processes and called over HTTP."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import chains
from chains.loader import load_chain
from tests.helpers import Cli

VENDORED = Path(__file__).parent / "vendored"
TESTS = VENDORED / "tests"

STREAMING = VENDORED / "examples" / "streaming" / "streaming_chain.py"
ITEST_RESULT = [6280, "erodfderodfderodfderodfderodfd", 123, {"parts": [], "part_lens": [10]}, ["a", "b"]]


@pytest.fixture
def on_path() -> Iterator[None]:
    """The chain files import their neighbours (user_package) as their own folder's modules."""
    saved = list(sys.path)
    yield
    sys.path[:] = saved


@pytest.mark.parametrize(
    ("file", "entrypoint", "chainlets"),
    [
        ("itest_chain/itest_chain.py", None, 6),
        ("http_errors/http_errors.py", None, 2),
        ("throttling_chain/throttling_chain.py", None, 2),
        ("timeout/timeout_chain.py", None, 3),
        ("numpy_and_binary/chain.py", "HostJSON", 5),
        ("numpy_and_binary/chain.py", "HostBinary", 5),
        ("custom_health_checks/custom_health_checks.py", None, 1),
        ("traditional_truss/truss_model.py", None, 1),
        ("../examples/streaming/streaming_chain.py", None, 3),
        ("websocket_chain/websocket_chain.py", None, 2),
    ],
)
def test_chains_check_passes(file: str, entrypoint: str | None, chainlets: int) -> None:
    cli = Cli(Path("unused"))
    args = ["check", str(TESTS / file), *(["--entrypoint", entrypoint] if entrypoint else [])]
    result = cli.run(*args)
    assert result.stdout.startswith("ok: chain"), result.stdout
    assert f"{chainlets} chainlet" in result.stdout


async def test_itest_chain_runs_locally_as_truss_expects(on_path: None) -> None:
    chain = load_chain(TESTS / "itest_chain" / "itest_chain.py")
    with chains.run_local():
        entry = chain.entrypoint.cls()
        # SplitTextFailOnce fails its first call; run_local, like Truss's, does not retry.
        with pytest.raises(ValueError, match="Haha this is a fake error"):
            await entry.run_remote(length=20, num_partitions=5)
        value, data, number, default, simple = await entry.run_remote(length=20, num_partitions=5)
    assert (value, data, number, default.model_dump(), simple) == (
        4198,
        "erodfderodfderodfder",
        123,
        {"parts": [], "part_lens": [10]},
        ["a", "b"],
    )


@pytest.mark.parametrize("host", ["HostJSON", "HostBinary"])
async def test_numpy_arrays_cross_json_and_binary_calls_locally(host: str) -> None:
    chain = load_chain(TESTS / "numpy_and_binary" / "chain.py", host)
    with chains.run_local():
        sync_result, async_result, no_input = await chain.entrypoint.cls().run_remote()
    assert sync_result.msg == "From sync" and async_result.msg == "From async"
    for result in (sync_result, async_result):
        assert result.np_array.array.shape == (3, 2, 1)
        assert (result.np_array.array == 1.0).all()
    assert no_input.msg == "From async no input"
    assert np.array_equal(no_input.np_array.array, np.full((2, 2), 3))


@pytest.mark.parametrize("use_sync", [False, True])
async def test_dependency_timeouts_hold_in_run_local_for_async_and_sync(use_sync: bool) -> None:
    chain = load_chain(TESTS / "timeout" / "timeout_chain.py")
    with chains.run_local(), pytest.raises(TimeoutError, match=r"timeout_sec=0\.5"):
        await chain.entrypoint.cls().run_remote(use_sync)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    # Every hop's detail for the tests' plain HTTP calls, as Truss Chains' local runs show it
    # (a plain caller gets the short form otherwise, see docs/concepts.md, "Errors").
    cli = Cli(tmp_path / "home", env={"CHAINS_DEBUG_ERRORS": "1"})
    yield cli
    for name in ("itest", "numpy-binary"):
        cli.run("stop", name, check=False)


def test_itest_chain_pushed_answers_over_http(cli: Cli) -> None:
    pushed = cli.push(str(TESTS / "itest_chain" / "itest_chain.py"), "--name", "itest", "--timeout", "120")
    url = pushed["entrypoint_url"] + "/run_remote"
    with httpx.Client(timeout=60) as client:
        # Our default: an exception the callee raised is not retried, so SplitTextFailOnce's
        # first failure reaches the caller, with its traceback.
        first = client.post(url, json={"length": 30, "num_partitions": 3})
        assert first.status_code == 500
        assert "Haha this is a fake error" in first.text and "SplitTextFailOnce" in first.text
        again = client.post(url, json={"length": 30, "num_partitions": 3})
        assert again.status_code == 200, again.text
        assert again.json() == ITEST_RESULT
        given = client.post(
            url,
            json={
                "length": 30,
                "num_partitions": 3,
                "pydantic_default_arg": {"parts": ["marius"], "part_lens": [3]},
                "simple_default_arg": ["bola"],
            },
        )
        assert given.json() == [*ITEST_RESULT[:3], {"parts": ["marius"], "part_lens": [3]}, ["bola"]]
        failing = client.post(url, json={"length": 300, "num_partitions": 3})
    assert failing.status_code == 500
    text = json.dumps(failing.json())
    assert "ValueError" in text and "This input is too long" in text


def test_truss_retry_semantics_are_one_setting_away(tmp_path: Path) -> None:
    """With CHAINS_RETRY_USER_ERRORS=1, stubs retry a callee's exception as Truss Chains does,
    so the first call succeeds exactly as Truss's own integration test expects."""
    cli = Cli(tmp_path / "home", env={"CHAINS_RETRY_USER_ERRORS": "1"})
    pushed = cli.push(
        str(TESTS / "itest_chain" / "itest_chain.py"), "--name", "itest-retry", "--timeout", "120"
    )
    try:
        with httpx.Client(timeout=60) as client:
            first = client.post(
                pushed["entrypoint_url"] + "/run_remote", json={"length": 30, "num_partitions": 3}
            )
    finally:
        cli.run("stop", "itest-retry", check=False)
    assert first.status_code == 200, first.text
    assert first.json() == ITEST_RESULT


def test_numpy_chain_pushed_sends_arrays_as_binary(cli: Cli) -> None:
    pushed = cli.push(
        str(TESTS / "numpy_and_binary" / "chain.py"), "--entrypoint", "HostBinary", "--name", "numpy-binary"
    )
    with httpx.Client(timeout=60) as client:
        answer = client.post(pushed["entrypoint_url"] + "/run_remote", json={})
    assert answer.status_code == 200, answer.text
    sync_result, async_result, no_input = answer.json()
    assert (sync_result["msg"], async_result["msg"], no_input["msg"]) == (
        "From sync",
        "From async",
        "From async no input",
    )
    array = sync_result["np_array"]
    data = np.frombuffer(base64.b64decode(array["data_b64"]), dtype=array["dtype"]).reshape(array["shape"])
    assert data.shape == (3, 2, 1) and (data == 1.0).all()


def test_a_truss_model_class_is_served_on_its_own(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(TESTS / "traditional_truss" / "truss_model.py"), "--name", "model")
    try:
        with httpx.Client(timeout=30) as client:
            url = pushed["entrypoint_url"] + "/run_remote"
            counts = [client.post(url, json={"call_count_increment": n}).json() for n in (1, 2, 3)]
    finally:
        cli.run("stop", "model", check=False)
    assert set(pushed["chainlets"]) == {"OverridePassthroughModelName"}
    assert counts == [1, 3, 6]


def test_custom_health_checks_show_in_readiness(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    pushed = cli.push(str(TESTS / "custom_health_checks" / "custom_health_checks.py"), "--name", "health")
    try:
        with httpx.Client(timeout=30) as client:
            base = pushed["entrypoint_url"]
            assert client.get(base + "/readyz").status_code == 200
            told = client.post(base + "/run_remote", json={"fail": True}).json()
            unhealthy = client.get(base + "/readyz").status_code
            client.post(base + "/run_remote", json={"fail": False})
            healthy_again = client.get(base + "/readyz").status_code
    finally:
        cli.run("stop", "health", check=False)
    assert told == "health checks will fail"
    assert (unhealthy, healthy_again) == (503, 200)


async def test_a_truss_style_structured_producer_streams_whole_locally() -> None:
    """Truss producers declare AsyncIterator[bytes] and yield stream_writer frames; the
    writer's end frame is added for them, so their readers see a complete stream."""
    chain = load_chain(STREAMING)
    with chains.run_local():
        result = await chain.entrypoint.cls().run_remote(False)
        with pytest.raises(RuntimeError, match="Test Error"):
            await chain.entrypoint.cls().run_remote(True)
    assert result.header.msg == "Start." and result.footer.msg == "Done."
    assert [c.words for c in result.chunks] == [
        ["G"],
        ["G", "HH"],
        ["G", "HH", "III"],
        ["G", "HH", "III", "JJJJ"],
    ]
    assert result.strings == "First second last."


async def test_a_truss_style_structured_producer_pushed_reads_with_stream_reader_and_curl(
    tmp_path: Path,
) -> None:
    cli = Cli(tmp_path / "home")
    entry = cli.push(str(STREAMING), "--name", "truss-streaming")
    producer = cli.push(str(STREAMING), "--entrypoint", "Generator", "--name", "truss-producer")
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            answer = await client.post(entry["entrypoint_url"] + "/run_remote", json={"cause_error": False})
            failed = await client.post(entry["entrypoint_url"] + "/run_remote", json={"cause_error": True})
            module = sys.modules[load_chain(STREAMING).entrypoint.cls.__module__]
            async with client.stream(
                "POST",
                producer["entrypoint_url"] + "/run_remote",
                json={"cause_error": False},
                headers={"accept": "application/octet-stream"},
            ) as response:
                reader = chains.stream_reader(module.STREAM_TYPES, response.aiter_bytes())
                header = await reader.read_header()
                items = [item async for item in reader.read_items()]
                footer = await reader.read_footer()
    finally:
        cli.run("stop", "truss-streaming", check=False)
        cli.run("stop", "truss-producer", check=False)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["strings"] == "First second last." and len(body["chunks"]) == 4
    assert failed.status_code == 500 and "Test Error" in failed.text
    assert header.msg == "Start." and len(items) == 4 and footer.msg == "Done."


def test_an_http_exception_keeps_its_status_and_detail_through_every_hop(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home", env={"CHAINS_DEBUG_ERRORS": "1"})
    pushed = cli.push(str(TESTS / "http_errors" / "http_errors.py"), "--name", "http-errors")
    try:
        with httpx.Client(timeout=60) as client:
            response = client.post(pushed["entrypoint_url"] + "/run_remote", json={"max_value": 12})
    finally:
        cli.run("stop", "http-errors", check=False)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["detail"] == "This is a test error."
    error = body["error"]
    # Truss Chains' RemoteErrorDetail fields, beside chains' own.
    assert error["exception_cls_name"] == "HTTPException"
    assert error["exception_module_name"] == "fastapi.exceptions"
    assert error["exception_message"] == "This is a test error."
    frames = error["user_stack_trace"]
    assert frames and frames[-1]["filename"].endswith("http_errors.py") and frames[-1]["name"] == "run_remote"
    assert error["cause"]["chainlet"] == "FailingHelper" and error["cause"]["status"] == 422


@pytest.mark.parametrize(
    "file",
    ["baseten_llm/trt_llama.py", "mistral/mistral_chainlet.py", "audio-transcription/whisper_chainlet.py"],
)
def test_files_that_need_baseten_fail_with_one_clear_message(file: str) -> None:
    result = Cli(Path("unused")).run("check", str(VENDORED / "examples" / file), check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "imports truss, Truss's own package" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_baseten_only_names_say_so_when_used(tmp_path: Path) -> None:
    file = tmp_path / "engine.py"
    file.write_text("import chains\n\n\nclass Llama(chains.EngineBuilderLLMChainlet):\n    pass\n")
    result = Cli(tmp_path / "home").run("check", str(file), check=False)
    assert result.returncode == 1
    assert "chains.EngineBuilderLLMChainlet is a TensorRT-LLM engine" in result.stderr
    assert "runs on Baseten only" in result.stderr


async def test_the_throttling_chain_waits_for_slots_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    chain = load_chain(TESTS / "throttling_chain" / "throttling_chain.py")
    with chains.run_local(), caplog.at_level("WARNING", logger="chains.stubs"):
        entry = chain.entrypoint.cls()
        four = await entry.run_remote(num_requests=4)
        eight = await entry.run_remote(num_requests=8)
    # Each call sleeps 0.5 s and 4 run at once: 8 calls need two rounds, 4 calls one.
    assert four >= 0.5 and eight >= 1.0
    waits = [r.getMessage() for r in caplog.records if "wait for a slot" in r.getMessage()]
    assert waits and "concurrency_limit=4" in waits[0]


def test_the_timeout_and_throttling_chains_pushed_answer_over_http(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    timeout = cli.push(str(TESTS / "timeout" / "timeout_chain.py"), "--name", "truss-timeout")
    throttling = cli.push(str(TESTS / "throttling_chain" / "throttling_chain.py"), "--name", "truss-throttle")
    try:
        with httpx.Client(timeout=60) as client:
            for use_sync, dependency in ((False, "Dependency"), (True, "DependencySync")):
                answer = client.post(timeout["entrypoint_url"] + "/run_remote", json={"use_sync": use_sync})
                assert answer.status_code == 500, answer.text
                error = answer.json()["error"]
                assert error["exc_type"] == "DeadlineExceeded", error
                assert error["message"].startswith(f"{dependency} did not answer within 0.5s"), error
            four = client.post(throttling["entrypoint_url"] + "/run_remote", json={"num_requests": 4})
            eight = client.post(throttling["entrypoint_url"] + "/run_remote", json={"num_requests": 8})
        # Each dependency call sleeps 0.5 s and the stub lets 4 run at once: 8 take two rounds.
        assert four.json() >= 0.5 and eight.json() >= 1.0
        logs = cli.run("logs", "truss-throttle", "ThrottlingChain", "--lines", "500").stdout
        assert "wait for a slot" in logs and "concurrency_limit=4" in logs
    finally:
        cli.run("stop", "truss-timeout", check=False)
        cli.run("stop", "truss-throttle", check=False)
