"""Postponed annotations: forward references, quoted names, and types defined after their use."""
# ruff: noqa: UP037, UP045

from __future__ import annotations

import typing
from collections.abc import AsyncIterator

import pydantic

import chains


class Shouter(chains.ChainletBase):
    async def run_remote(self, note: Note, notes: list["Note"] | None = None) -> "Reply":
        return Reply(text=note.text.upper(), count=len(notes or []))


class Lister(chains.ChainletBase):
    async def run_remote(
        self, tag: typing.Literal["Note", "x"] = "Note", limit: typing.Optional[int] = None
    ) -> AsyncIterator[Note]:
        yield Note(text=tag)


@chains.mark_entrypoint
class Caller(chains.ChainletBase):
    def __init__(
        self, shouter: Shouter = chains.depends(Shouter), lister: Lister = chains.depends(Lister)
    ) -> None:
        self._shouter, self._lister = shouter, lister

    async def run_remote(self, text: str) -> str:
        reply = await self._shouter.run_remote(Note(text=text))
        return reply.text


class Note(pydantic.BaseModel):
    text: str


class Reply(pydantic.BaseModel):
    text: str
    count: int
