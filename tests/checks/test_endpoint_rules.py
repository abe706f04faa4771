"""DESIGN §2, the rules about `run_remote`: each test asserts the reported place and message."""

from __future__ import annotations

from collections.abc import Callable

from chains.loader import load_chain
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]


def test_missing_run_remote(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run(self, x: int) -> int:
                return x
    """)
    v = f.only_violation()
    assert (v.path, v.line, v.where) == (str(f.path), f.line("class Entry"), "Entry")
    assert "no `run_remote` method" in v.message


def test_run_remote_must_take_self_first(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            @staticmethod
            async def run_remote(x: int) -> int:
                return x
    """)
    v = f.only_violation()
    assert (v.line, v.where) == (f.line("async def run_remote"), "Entry.run_remote")
    assert "taking `self` first" in v.message


def test_star_args_and_kwargs_are_rejected_each_on_its_line(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(
                self,
                *args: int,
                **kwargs: str,
            ) -> int:
                return 0
    """)
    first, second = f.violations()
    assert (first.line, first.where) == (f.line("*args: int"), "Entry.run_remote")
    assert "`*args` is not allowed" in first.message
    assert second.line == f.line("**kwargs: str")
    assert "`**kwargs` is not allowed" in second.message


def test_unannotated_parameter_and_return(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, x):
                return x
    """)
    first, second = f.violations()
    assert first.line == f.line("async def run_remote")
    assert "parameter `x` has no type annotation" in first.message
    assert "no return annotation" in second.message


def test_future_annotations_and_forward_references_resolve(chain_file: Write) -> None:
    f = chain_file(
        """
        from __future__ import annotations
        from typing import AsyncIterator

        import pydantic

        import chains


        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, item: Item, n: int = 2) -> AsyncIterator[Item]:
                for _ in range(n):
                    yield item


        class Item(pydantic.BaseModel):  # defined after its first use
            text: str
        """,
        header="",
    )
    chain = load_chain(f.path)
    endpoint = chain.entrypoint.endpoint
    assert endpoint.output_kind.name == "items"
    assert endpoint.output_type.__name__ == "Item"
    assert [p.name for p in endpoint.params] == ["item", "n"]


def test_unresolvable_annotation_is_reported_at_load(chain_file: Write) -> None:
    f = chain_file(
        """
        from __future__ import annotations

        import chains


        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, x: Missing) -> int:
                return 0
        """,
        header="",
    )
    v = f.only_violation()
    assert v.line == f.line("async def run_remote")
    assert "cannot resolve the annotations" in v.message and "Missing" in v.message


def test_unserializable_input_names_parameter_and_type(chain_file: Write) -> None:
    f = chain_file("""
        class Opaque:
            pass

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, fine: dict[str, list[int]], thing: Opaque) -> int:
                return 0
    """)
    v = f.only_violation()
    assert v.line == f.line("async def run_remote")
    assert "parameter `thing` has type Opaque, which cannot be sent over the wire" in v.message


def test_unserializable_output_type(chain_file: Write) -> None:
    f = chain_file("""
        import threading

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> threading.Lock:
                return threading.Lock()
    """)
    v = f.only_violation()
    assert "the return type threading.Lock cannot be sent over the wire" in v.message


def test_nested_serializable_types_pass(chain_file: Write) -> None:
    f = chain_file("""
        import enum
        from typing import Literal, Optional, Union

        class Color(enum.Enum):
            RED = "red"

        class Inner(pydantic.BaseModel):
            tags: set[str]
            pair: tuple[int, str]

        class Outer(pydantic.BaseModel):
            inner: list[dict[str, Optional[Inner]]]

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(
                self, o: Outer, c: Color, mode: Literal["a", "b"], u: Union[int, str, None], raw: bytes
            ) -> dict[str, list[Outer]]:
                return {}
    """)
    chain = load_chain(f.path)
    assert chain.entrypoint.endpoint.output_kind.name == "unary"


def test_yield_needs_an_iterator_annotation(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> str:
                yield "x"
    """)
    v = f.only_violation()
    assert v.line == f.line("async def run_remote")
    assert "the body yields" in v.message


def test_iterator_annotation_needs_a_yield(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> AsyncIterator[str]:
                return None
    """)
    assert "the body has no `yield`" in f.only_violation().message


def test_sync_generator_is_rejected(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            def run_remote(self) -> Iterator[str]:
                yield "x"
    """)
    v = f.only_violation()
    assert "streaming endpoints must be `async def`" in v.message


def test_structured_stream_must_wrap_bytes(chain_file: Write) -> None:
    f = chain_file("""
        class Tok(pydantic.BaseModel):
            text: str

        TYPES = chains.stream_types(Tok)

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> Annotated[AsyncIterator[str], TYPES]:
                yield "x"
    """)
    assert "Annotated[AsyncIterator[bytes], <StreamTypes>]" in f.only_violation().message


def test_generator_cannot_receive_values(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> AsyncGenerator[str, int]:
                yield "x"
    """)
    assert "AsyncGenerator[T, None]" in f.only_violation().message


def test_unserializable_stream_item(chain_file: Write) -> None:
    f = chain_file("""
        class Opaque:
            pass

        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self) -> AsyncIterator[Opaque]:
                yield Opaque()
    """)
    assert "the stream item type Opaque cannot be sent over the wire" in f.only_violation().message


def test_stream_kinds(chain_file: Write) -> None:
    f = chain_file("""
        class Tok(pydantic.BaseModel):
            text: str

        TYPES = chains.stream_types(Tok, footer_type=Tok)

        class Text(chains.ChainletBase):
            async def run_remote(self) -> AsyncIterator[str]:
                yield "x"

        class Raw(chains.ChainletBase):
            async def run_remote(self) -> AsyncGenerator[bytes, None]:
                yield b"x"

        class Events(chains.ChainletBase):
            async def run_remote(self) -> AsyncIterator[chains.SSE]:
                yield chains.SSE("x")

        class Items(chains.ChainletBase):
            async def run_remote(self) -> AsyncIterator[list[int]]:
                yield [1]

        @chains.mark_entrypoint
        class Structured(chains.ChainletBase):
            def __init__(
                self,
                a: Text = chains.depends(Text),
                b: Raw = chains.depends(Raw),
                c: Events = chains.depends(Events),
                d: Items = chains.depends(Items),
            ) -> None:
                pass

            async def run_remote(self) -> Annotated[AsyncIterator[bytes], TYPES]:
                yield b""
    """)
    chain = load_chain(f.path)
    kinds = {spec.name: spec.endpoint.output_kind.name for spec in chain.chainlets}
    assert kinds == {
        "Text": "text",
        "Raw": "bytes",
        "Events": "sse",
        "Items": "items",
        "Structured": "structured",
    }
    assert chain.entrypoint.endpoint.stream_types is not None


def test_sync_unary_endpoint_is_allowed(chain_file: Write) -> None:
    f = chain_file("""
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            def run_remote(self, x: int) -> int:
                return x
    """)
    assert load_chain(f.path).entrypoint.endpoint.is_async is False
