"""Types from a neighbouring module (by name, under an alias, via the module); a chainlet from another."""

import datetime as dt
import typing
from collections.abc import AsyncIterator

import codegen_neighbour_types as types_module
from codegen_neighbour_chainlets import Echo
from codegen_neighbour_types import ORIGIN_X, Color
from codegen_neighbour_types import Point as P

import chains


class Painter(chains.ChainletBase):
    remote_config = chains.RemoteConfig(
        name="painter-v2",
        docker_image=chains.DockerImage(
            base_image="python:3.12-slim",
            pip_requirements=["pillow"],
            requirements_file="requirements-extra.txt",
        ),
    )

    async def run_remote(
        self,
        box: types_module.Box,
        corner: P = P(x=ORIGIN_X, y=1.5),
        color: Color = Color.BLUE,
        when: dt.datetime | None = None,
        tags: typing.Sequence[str] = (),
    ) -> list[P]:
        return [box.corner, corner]


class Walker(chains.ChainletBase):
    async def run_remote(self, start: P) -> AsyncIterator[types_module.Point]:
        yield start


@chains.mark_entrypoint("neighbours")
class Start(chains.ChainletBase):
    def __init__(
        self,
        painter: Painter = chains.depends(Painter),
        walker: Walker = chains.depends(Walker, timeout_sec=5),
        echo: Echo = chains.depends(Echo),
    ) -> None:
        self._painter, self._walker, self._echo = painter, walker, echo

    async def run_remote(self, x: float) -> list[P]:
        return await self._painter.run_remote(types_module.Box(corner=P(x=x, y=x)))
