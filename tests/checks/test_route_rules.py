"""The rules about `@chains.route` endpoints: each test asserts the reported place and message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chains.loader import load_chain
from chains.routes import ParamSource, routes_of
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]

_BODY = """
        class Body(pydantic.BaseModel):
            text: str

"""


def _entry(routes: str) -> str:
    return (
        _BODY
        + """
        @chains.mark_entrypoint
        class Entry(chains.ChainletBase):
            async def run_remote(self, x: int) -> int:
                return x
"""
        + routes
    )


def test_a_clean_route_is_described_by_where_each_parameter_comes_from(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("POST", "/v1/items/{item_id}")
            async def put(
                self,
                item_id: int,
                body: Body,
                limit: Annotated[int, chains.Query()] = 10,
                user_agent: Annotated[str | None, chains.Header()] = None,
            ) -> Body:
                return body
""")
    )
    (route,) = routes_of(load_chain(f.path).entrypoint.cls)
    assert [(p.name, p.source, p.key) for p in route.params] == [
        ("item_id", ParamSource.PATH, "item_id"),
        ("body", ParamSource.BODY, "body"),
        ("limit", ParamSource.QUERY, "limit"),
        ("user_agent", ParamSource.HEADER, "user-agent"),
    ]
    assert route.match("/v1/items/3") == {"item_id": "3"}
    assert route.match("/v1/items/3/more") is None


@pytest.mark.parametrize("path", ["/run_remote", "/healthz", "/_chains/methods/x", "/openapi.json"])
def test_the_servers_own_routes_are_reserved(chain_file: Write, path: str) -> None:
    f = chain_file(
        _entry(f"""
            @chains.route("GET", "{path}")
            async def mine(self) -> int:
                return 1
""")
    )
    v = f.only_violation()
    assert (v.line, v.where) == (f.line("async def mine"), "Entry.mine")
    assert f"the route {path!r} is the server's own" in v.message


def test_two_methods_on_one_route_clash_even_with_other_parameter_names(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/items/{a}")
            async def first(self, a: str) -> str:
                return a

            @chains.route("GET", "/items/{b}")
            async def second(self, b: str) -> str:
                return b

            @chains.route("POST", "/items/{c}")
            async def third(self, c: str, body: Body) -> str:
                return c
""")
    )
    v = f.only_violation()
    assert (v.line, v.where) == (f.line("async def second"), "Entry.second")
    assert "route GET /items/{b} of `second` is also the route of `first`" in v.message


def test_a_parameter_from_nowhere_is_named_with_the_fix(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/search")
            async def search(self, q: str) -> str:
                return q
""")
    )
    v = f.only_violation()
    assert v.where == "Entry.search"
    assert "`q: str` is not in the route '/search'" in v.message
    assert "`q: Annotated[str, chains.Query()]`" in v.message


def test_the_body_is_one_model_and_a_get_has_none(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("POST", "/two")
            async def two(self, a: Body, b: Body) -> str:
                return ""

            @chains.route("GET", "/get")
            async def get(self, body: Body) -> str:
                return ""
""")
    )
    messages = sorted(v.message for v in f.violations())
    assert len(messages) == 2
    assert "`two` takes 2 pydantic models (a, b) but a request has one body" in messages[0]
    assert "a GET request has no body; take `body` with POST, PUT or PATCH" in messages[1]


def test_a_sync_generator_route_is_refused(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/ticks")
            def ticks(self) -> Iterator[str]:
                yield "a"
""")
    )
    v = f.only_violation()
    assert v.where == "Entry.ticks"
    assert "sync generator" in v.message


def test_a_route_naming_a_path_parameter_the_method_lacks(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/items/{item_id}")
            async def item(self) -> int:
                return 1
""")
    )
    assert "names {item_id}, which `item` does not take" in f.only_violation().message


def test_bad_method_and_path_shapes(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("FETCH", "v1/x")
            async def odd(self) -> int:
                return 1
""")
    )
    messages = [v.message for v in f.violations()]
    assert any("method 'FETCH' is not one of GET, POST, PUT, PATCH, DELETE" in m for m in messages)
    assert any("the route 'v1/x' must start with '/'" in m for m in messages)


def test_value_or_stream_must_be_a_coroutine(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("POST", "/either")
            async def either(self, body: Body) -> Body | AsyncIterator[str]:
                yield "a"
""")
    )
    assert "`either` yields, so it always streams" in f.only_violation().message


def test_a_route_return_type_that_cannot_be_sent(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/lock")
            async def lock(self) -> asyncio.Lock:
                return asyncio.Lock()
""")
    )
    v = f.only_violation()
    assert v.where == "Entry.lock"
    assert "cannot be sent over the wire" in v.message


def test_a_route_may_not_take_a_name_its_stub_needs(chain_file: Write) -> None:
    f = chain_file(
        _entry("""
            @chains.route("GET", "/path")
            async def path(self) -> int:
                return 1
""")
    )
    v = f.only_violation()
    assert v.where == "Entry.path"
    assert "`path` cannot be a route" in v.message


def test_the_names_kept_for_stubs_are_every_public_name_of_stubbase() -> None:
    from chains.routes import STUB_NAMES
    from chains.stubs import StubBase

    public = {n for n in dir(StubBase) if not n.startswith("_")}
    probe = StubBase("http://127.0.0.1:9")
    public |= {n for n in vars(probe) if not n.startswith("_")}
    assert public <= STUB_NAMES
