"""The rules of a ``@chains.batched`` run_remote: each test asserts the reported place and message."""

from __future__ import annotations

from collections.abc import Callable

from chains.loader import load_chain
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]


def test_bad_decorator_arguments_are_named(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched(max_batch_size=0, max_wait_ms="10")
            async def run_remote(self, xs: list[int]) -> list[int]:
                return xs
    """)
    first, second = f.violations()
    assert first.where == second.where == "Entry.run_remote"
    assert first.line == f.line("async def run_remote")
    assert first.message == "@chains.batched(...): max_batch_size must be a whole number >= 1, got 0"
    assert (
        second.message == "@chains.batched(...): max_wait_ms must be a number >= 0 (milliseconds), got '10'"
    )


def test_input_must_be_a_list(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched
            async def run_remote(self, x: int) -> list[int]:
                return [x]
    """)
    v = f.only_violation()
    assert v.where == "Entry.run_remote"
    assert v.message.startswith(
        "parameter `x` of a batched run_remote is annotated int; annotate it `list[...]`"
    )


def test_output_must_be_a_list(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched(max_batch_size=4)
            def run_remote(self, xs: list[int]) -> int:
                return 0
    """)
    v = f.only_violation()
    assert "its return annotation must be `list[...]`, not int" in v.message


def test_exactly_one_parameter(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched
            async def run_remote(self, xs: list[int], ys: list[int]) -> list[int]:
                return xs
    """)
    v = f.only_violation()
    assert "takes exactly one parameter, the list of a batch's inputs" in v.message
    assert "it has 2 (`xs`, `ys`)" in v.message


def test_a_streaming_batch_yields_lists(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched
            async def run_remote(self, xs: list[int]) -> AsyncIterator[int]:
                yield 1
    """)
    v = f.only_violation()
    assert v.message == (
        "a streaming batched run_remote yields one list per step, one output per input: "
        "annotate it `AsyncIterator[list[...]]`, not AsyncIterator[int]"
    )


def test_a_streaming_batch_is_one_stream_per_caller(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched
            async def run_remote(self, prompts: list[str]) -> AsyncIterator[list[str | ValueError]]:
                yield prompts
    """)
    endpoint = load_chain(f.path).entrypoint.endpoint
    assert (endpoint.output_kind.name, endpoint.output_type) == ("text", str)
    assert endpoint.describe().startswith("async run_remote(prompts: str) -> stream of str (batched:")


def test_the_wire_form_is_one_item_without_returned_exceptions(chain_file: Write) -> None:
    f = chain_file("""
        class Point(pydantic.BaseModel):
            x: int

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @chains.batched(max_batch_size=16, max_wait_ms=2.5)
            def run_remote(self, points: list[Point]) -> list[int | ValueError]:
                return [p.x for p in points]
    """)
    endpoint = load_chain(f.path).entrypoint.endpoint
    assert endpoint.describe() == (
        "async run_remote(points: Point) -> int (batched: up to 16 calls per run, waiting up to 2.5 ms)"
    )
    assert endpoint.input_model.model_json_schema()["properties"]["points"]["$ref"].endswith("Point")
    assert endpoint.output_adapter.json_schema() == {"type": "integer"}
