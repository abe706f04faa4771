"""A dependency's async call used without ``await``: reported by the check with its line, and
named at run time (under ``run_local``) where the check cannot see it."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable

import pytest

import chains
from chains.loader import load_chain
from tests.checks.conftest import ChainFile

Write = Callable[..., ChainFile]

CHUNKER = """
class Chunker(chains.ChainletBase):
    async def run_remote(self, text: str) -> list[str]:
        return text.split()


class Lines(chains.ChainletBase):
    async def run_remote(self, text: str) -> AsyncIterator[str]:
        for line in text.splitlines():
            yield line


class Counter(chains.ChainletBase):
    def run_remote(self, text: str) -> int:
        return len(text)

"""


def entry(body: str) -> str:
    return CHUNKER + (
        """
@chains.mark_entrypoint
class Entry(chains.ChainletBase):
    def __init__(self, chunker=chains.depends(Chunker), lines=chains.depends(Lines),
                 counter=chains.depends(Counter)) -> None:
        self._chunker = chunker
        self._lines = lines
        self._counter = counter

"""
        + body
    )


def test_a_measured_result_names_the_line_and_the_fix(chain_file: Write) -> None:
    f = chain_file(
        entry("""
    async def run_remote(self, text: str) -> int:
        chunks = self._chunker.run_remote(text)
        return len(chunks)
""")
    )
    v = f.only_violation()
    assert (v.path, v.line, v.where) == (str(f.path), f.line("chunks = self._chunker"), "Entry.run_remote")
    assert v.message == (
        "`self._chunker.run_remote(...)` is not awaited: Chunker.run_remote is async, so without "
        "`await` this is a coroutine, not its result; did you forget `await self._chunker.run_remote(...)`?"
    )


@pytest.mark.parametrize(
    "body",
    [
        "        self._chunker.run_remote(text)\n        return 0",
        "        return len(self._chunker.run_remote(text))",
        "        return self._chunker.run_remote(text)",
        "        return sum(1 for _ in self._chunker.run_remote(text))",
        "        return 1 if self._chunker.run_remote(text) else 0",
        "        x = self._chunker.run_remote(text)\n        return 0",
        "        return len(self._chunker.run_remote(text)[0])",
    ],
    ids=["dropped", "measured", "returned", "iterated", "tested", "never-awaited-name", "indexed"],
)
def test_every_unawaited_use_is_reported(chain_file: Write, body: str) -> None:
    f = chain_file(entry(f"    async def run_remote(self, text: str) -> int:\n{body}\n"))
    v = f.only_violation()
    assert v.line == f.line("self._chunker.run_remote(text)")
    assert "did you forget `await self._chunker.run_remote(...)`?" in v.message


def test_a_helper_method_is_checked_too(chain_file: Write) -> None:
    f = chain_file(
        entry("""
    async def run_remote(self, text: str) -> int:
        return await self._count(text)

    async def _count(self, text: str) -> int:
        return len(self._chunker.run_remote(text))
""")
    )
    assert f.only_violation().where == "Entry._count"


def test_correct_code_is_not_reported(chain_file: Write) -> None:
    f = chain_file(
        entry("""
    async def run_remote(self, text: str) -> int:
        a = await self._chunker.run_remote(text)
        b, c = await asyncio.gather(self._chunker.run_remote(text), self._chunker.run_remote(text))
        many = await asyncio.gather(*(self._chunker.run_remote(t) for t in text.split()))
        pending = [self._chunker.run_remote(t) for t in text.split()]
        done = await asyncio.gather(*pending)
        later = self._chunker.run_remote(text)
        d = await later
        task = asyncio.create_task(self._chunker.run_remote(text))
        e = await asyncio.wait_for(self._chunker.run_remote(text), 5)
        lines = [line async for line in self._lines.run_remote(text)]
        n = self._counter.run_remote(text)
        return len(a + b + c + d + e + await task) + len(many) + len(done) + len(lines) + n

    async def nested(self, text: str) -> list[list[str]]:
        def call(t: str) -> object:  # a scope of its own: its caller awaits what it returns
            return self._chunker.run_remote(t)

        return list(await asyncio.gather(*(call(t) for t in text.split())))

    def sync_helper(self, text: str) -> object:
        return self._chunker.run_remote(text)
""")
    )
    load_chain(f.path)


def test_run_local_says_what_the_check_says(chain_file: Write) -> None:
    # A call through an alias is beyond the check; run_local's stub names the fix instead.
    f = chain_file(
        entry("""
    async def run_remote(self, text: str) -> int:
        chunker = self._chunker
        return len(chunker.run_remote(text))
""")
    )
    entrypoint = load_chain(f.path).entrypoint.cls
    hint = "did you forget `await self._chunker.run_remote(...)`?"
    with chains.run_local(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app = entrypoint()
        with pytest.raises(TypeError) as info:
            asyncio.run(app.run_remote("a b"))
        message = str(info.value)
        del info
        gc.collect()
    assert message.startswith("Chunker.run_remote(...) was called without `await`")
    assert message.endswith(hint)
    unawaited = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert unawaited, "the dropped call was not reported"
    assert all(hint in m and "LocalStub" not in m for m in unawaited), unawaited


def test_run_local_stubs_still_work_with_asyncio(chain_file: Write) -> None:
    f = chain_file(
        entry("""
    async def run_remote(self, text: str) -> int:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(self._chunker.run_remote(text))
        first, second = await asyncio.gather(self._chunker.run_remote(text), self._chunker.run_remote("x"))
        return len(task.result()) + len(first) + len(second)
""")
    )
    entrypoint = load_chain(f.path).entrypoint.cls
    with chains.run_local(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert asyncio.run(entrypoint().run_remote("a b c")) == 7
