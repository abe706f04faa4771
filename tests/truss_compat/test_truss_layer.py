"""chains.truss_compat: Truss Chains' names and arguments mapped onto chains' own types.

A Truss file's ``chains.push(Entry, "demo", publish=True)`` warns and pushes, its error
bodies carry Truss's ``RemoteErrorDetail`` fields, and its spellings of chains' classes and
config work; the core's own push takes chains' arguments alone.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import httpx
import pytest

import chains
import chains.deploy
from chains.errors import ChainsUsageError, ErrorDetail
from chains.truss_compat import names
from chains.truss_compat.config import ASSETS_POSITIONAL, COMPUTE_POSITIONAL, by_position, compute_fields
from chains.truss_compat.errors import error_body, remote_error_detail
from chains.truss_compat.push import BASETEN_PUSH_ARGUMENTS, baseten_push_arguments
from tests.helpers import write_chain
from tests.unit.test_layers import TRUSS_NAMES

FAILING = """
import chains


@chains.mark_entrypoint
class Echo(chains.ChainletBase):
    async def run_remote(self, text: str) -> str:
        if text == "bad":
            raise ValueError("no bad text")
        return text
"""


def test_a_truss_push_with_baseten_options_warns_pushes_and_answers_in_truss_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "home"))
    # The user's frames reach the outside caller only when asked for, as in Truss's tests.
    monkeypatch.setenv("CHAINS_DEBUG_ERRORS", "1")
    file = write_chain(tmp_path, FAILING)
    with pytest.warns(UserWarning, match=r"publish, environment are Baseten-only options") as caught:
        chain = chains.push(file, "truss-layer", True, environment="staging")
    with chain:
        # The warning points at the caller's line, not at the layer.
        ours = [w for w in caught if "Baseten-only" in str(w.message)]
        assert [Path(w.filename).name for w in ours] == [Path(__file__).name]
        assert chain.name == "truss-layer" and chain.target == "local"
        assert chain.call(text="hi") == "hi"
        answer = httpx.post(chain.entrypoint_url + "/run_remote", json={"text": "bad"}, timeout=30)
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    # chains' own fields and Truss's, for the same failure.
    assert (error["exc_type"], error["message"]) == ("ValueError", "no bad text")
    assert (error["exception_cls_name"], error["exception_module_name"]) == ("ValueError", None)
    assert error["exception_message"] == "no bad text"
    frame = error["user_stack_trace"][-1]
    assert frame["filename"].endswith("chain.py") and frame["name"] == "run_remote"
    assert frame["line"] == 'raise ValueError("no bad text")'


def test_truss_push_arguments_by_position_follow_truss_order() -> None:
    assert baseten_push_arguments(list(range(len(BASETEN_PUSH_ARGUMENTS))), {}) == list(
        BASETEN_PUSH_ARGUMENTS
    )
    assert baseten_push_arguments([True, False], {"progress_bar": None}) == [
        "publish",
        "promote",
        "progress_bar",
    ]
    assert baseten_push_arguments([], {}) == []


def test_an_unknown_push_argument_is_refused_by_name_before_anything_runs(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-chain.py"  # never read: the arguments are refused first
    with pytest.raises(ChainsUsageError, match=r"unexpected arguments: publsh; it takes the entrypoint"):
        chains.push(missing, "demo", publsh=True)
    with pytest.raises(ChainsUsageError, match=r"unexpected arguments: 11 positional arguments"):
        chains.push(missing, "demo", *range(9))
    with pytest.raises(ChainsUsageError, match=r"two chain names, 'a' and 'b'"):
        chains.push(missing, "a", name="b")


def test_chains_own_push_takes_chains_arguments_alone() -> None:
    parameters = inspect.signature(chains.deploy.push).parameters
    kinds = {p.kind for p in parameters.values()}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds and inspect.Parameter.VAR_KEYWORD not in kinds
    assert not set(parameters) & TRUSS_NAMES
    with pytest.raises(TypeError):
        chains.deploy.push("chain.py", publish=True)  # type: ignore[call-arg]
    # The front door's push is the layer's, which keeps every keyword of chains' own.
    assert chains.push is chains.truss_compat.push.push
    wrapper = inspect.signature(chains.push).parameters
    assert {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY} <= set(wrapper)


def test_a_push_without_baseten_options_does_not_warn(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ChainsUsageError, match=r"no-such-chain\.py"):
            chains.push(tmp_path / "no-such-chain.py", "demo")


def test_truss_error_fields_name_the_type_module_message_and_user_frames() -> None:
    def failing() -> None:
        raise ValueError("bad input")

    try:
        failing()
    except ValueError as exc:
        detail = ErrorDetail.from_exception(exc, "Words")
    fields = remote_error_detail(detail)
    assert (fields["exception_cls_name"], fields["exception_module_name"]) == ("ValueError", None)
    assert fields["exception_message"] == "bad input"
    last = fields["user_stack_trace"][-1]
    assert last["name"] == "failing" and last["line"] == 'raise ValueError("bad input")'
    assert last["filename"].endswith("test_truss_layer.py") and last["lineno"] > 0
    # A type of its own module keeps it; the body holds chains' fields too.
    other = ErrorDetail(exc_type="Oops", exc_module="app.errors", message="m", chainlet="Words")
    body = error_body(other)
    assert body["exception_module_name"] == "app.errors" and body["chainlet"] == "Words"
    assert set(body) == {*ErrorDetail.model_fields, *fields}


def test_the_layers_rule_knows_every_name_the_layer_maps() -> None:
    # The rule of tests/unit/test_layers.py keeps these out of the core; a name added here
    # and not there would slip back unseen. "remote" and "environment" are words the core
    # uses for its own meanings.
    mapped = set(BASETEN_PUSH_ARGUMENTS) - {"remote", "environment"}
    fields = set(remote_error_detail(ErrorDetail(exc_type="E", exc_module="m", message="")))
    assert mapped | fields | {"RPCOptions", "predict_concurrency", "pip_requirements_file"} <= TRUSS_NAMES


def test_truss_names_of_chains_classes_are_the_same_classes() -> None:
    assert chains.RPCOptions is names.RPCOptions is chains.StubOptions
    assert "RPCOptions" not in vars(chains.rpc_options)
    assert names.written_name(chains.StubOptions) == "chains.RPCOptions"
    for name in names.BASETEN_ONLY:
        with pytest.raises(ChainsUsageError, match=rf"chains\.{name} is .*: it runs on Baseten only"):
            getattr(chains, name)


def test_truss_positional_orders_and_older_names_map_onto_chains_fields() -> None:
    assert chains.Compute(2, "4Gi", "A10G", 1, 8).concurrency == 8
    assert compute_fields({"predict_concurrency": None}) == {}
    assert chains.Assets([], ["hf_token"]).secret_keys == ["hf_token"]
    assert by_position("Assets", ASSETS_POSITIONAL, ([],), {}) == {"cached": []}
    with pytest.raises(ChainsUsageError, match=r"Assets got secret_keys both by position and by name"):
        chains.Assets([], ["a"], secret_keys=["b"])
    with pytest.raises(ChainsUsageError, match=r"Assets takes at most 4 positional arguments"):
        chains.Assets([], [], [], [], [])
    with pytest.raises(ChainsUsageError, match=r"Compute takes at most 6 positional arguments"):
        chains.Compute(*range(1, len(COMPUTE_POSITIONAL) + 2))
    image = chains.DockerImage(pip_requirements_file="reqs.txt")
    assert (image.requirements_file, image.pip_requirements_file) == ("reqs.txt", None)
