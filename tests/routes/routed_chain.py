"""A chain whose chainlets serve routes of their own, and call each other's routes through stubs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import pydantic

import chains


class Order(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    item: str
    quantity: int = 1


class Receipt(pydantic.BaseModel):
    order_id: str
    item: str
    quantity: int
    note: str | None = None
    extra: dict[str, object] = {}


class Shop(chains.ChainletBase):
    """Internal: its routes are called by the entrypoint's stubs, by method name."""

    async def run_remote(self, item: str) -> int:
        return len(item)

    @chains.route("POST", "/orders/{order_id}")
    async def place(
        self,
        order_id: str,
        order: Order,
        note: Annotated[str | None, chains.Query()] = None,
        customer: Annotated[str | None, chains.Header("x-customer")] = None,
    ) -> Receipt:
        if order.quantity < 0:
            raise chains.HTTPError(409, {"problem": "negative quantity"})
        if order.item == "boom":
            raise ValueError("the shop broke")
        return Receipt(
            order_id=order_id,
            item=order.item,
            quantity=order.quantity,
            note=note if customer is None else f"{note} for {customer}",
            extra=dict(order.model_extra or {}),
        )

    @chains.route("GET", "/count/{n}")
    async def count(self, n: int, word: Annotated[str, chains.Query()] = "tick") -> AsyncIterator[str]:
        for i in range(n):
            yield f"{word} {i}\n"

    @chains.route("POST", "/either")
    async def either(self, order: Order) -> Receipt | AsyncIterator[chains.SSE]:
        if order.quantity > 1:
            return _events(order)
        return Receipt(order_id="one", item=order.item, quantity=1)


async def _events(order: Order) -> AsyncIterator[chains.SSE]:
    for i in range(order.quantity):
        yield chains.SSE(f"{order.item} {i}")


@chains.mark_entrypoint
class Front(chains.ChainletBase):
    def __init__(self, shop: Shop = chains.depends(Shop)) -> None:
        self._shop = shop

    async def run_remote(self, item: str, quantity: int) -> list[str]:
        """Calls each of the shop's routes by name and reports what came back."""
        receipt = await self._shop.place(order_id="7", order=Order(item=item, quantity=quantity), note="hi")
        lines = [f"{receipt.order_id}:{receipt.item}x{receipt.quantity}:{receipt.note}"]
        lines += [line.strip() async for line in self._shop.count(n=2, word=item)]
        one = await self._shop.either(order=Order(item=item, quantity=1))
        lines.append(f"either one: {one.item}")  # type: ignore[union-attr]
        many = await self._shop.either(order=Order(item=item, quantity=quantity))
        lines += [f"either event: {event.data}" async for event in many]  # type: ignore[union-attr]
        return lines

    @chains.route("POST", "/v1/echo")
    async def echo(self, order: Order) -> Order:
        return order
