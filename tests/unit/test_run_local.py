"""run_local: in-process chains whose stubs behave like remote ones."""

from __future__ import annotations

import asyncio
import time

import pydantic
import pytest

import chains


class Point(pydantic.BaseModel):
    x: int
    y: int


class Blob(pydantic.BaseModel):
    data: bytes  # pydantic's default JSON form of bytes is UTF-8, which b"\xff" is not


class Geometry(chains.ChainletBase):
    instances = 0

    def __init__(self) -> None:
        type(self).instances += 1

    async def run_remote(self, p: Point, scale: int = 1) -> Point:
        if scale < 0:
            raise ValueError(f"scale must be >= 0, got {scale}")
        return Point(x=p.x * scale, y=p.y * scale)


class Echo(chains.ChainletBase):
    async def run_remote(self, p: Point) -> Point:
        return p


class Lies(chains.ChainletBase):
    async def run_remote(self, kind: str) -> int:
        return "not a number" if kind == "str" else 3  # type: ignore[return-value]


class Blobs(chains.ChainletBase):
    async def run_remote(self) -> Blob:
        return Blob(data=b"\xff\x00")


class Syncy(chains.ChainletBase):
    def run_remote(self, n: int) -> int:
        time.sleep(0.01)
        return n + 1


class Slow(chains.ChainletBase):
    active = 0
    peak = 0

    async def run_remote(self, delay: float) -> float:
        cls = type(self)
        cls.active += 1
        cls.peak = max(cls.peak, cls.active)
        try:
            await asyncio.sleep(delay)
        finally:
            cls.active -= 1
        return delay


class Secretive(chains.ChainletBase):
    remote_config = chains.RemoteConfig(assets=chains.Assets(secret_keys=["api_key"]))

    def __init__(self, context: chains.DeploymentContext = chains.depends_context()) -> None:
        self._context = context

    async def run_remote(self, key: str) -> str:
        return self._context.secrets[key]


class Entry(chains.ChainletBase):
    def __init__(
        self,
        geometry: Geometry = chains.depends(Geometry),
        again: Geometry = chains.depends(Geometry),
        lies: Lies = chains.depends(Lies),
        blobs: Blobs = chains.depends(Blobs),
        syncy: Syncy = chains.depends(Syncy),
        slow: Slow = chains.depends(Slow, concurrency_limit=2, timeout_sec=0.5),
        secretive: Secretive = chains.depends(Secretive),
        echo: Echo = chains.depends(Echo),
    ) -> None:
        self.echo = echo
        self.geometry, self.again, self.lies, self.blobs = geometry, again, lies, blobs
        self.syncy, self.slow, self.secretive = syncy, slow, secretive

    async def run_remote(self) -> int:
        return 0


def test_dependencies_are_injected_and_shared() -> None:
    Geometry.instances = 0
    with chains.run_local():
        entry = Entry()
        assert repr(entry.geometry) == "LocalStub(Geometry)"
        assert asyncio.run(entry.geometry.run_remote(Point(x=1, y=2), scale=3)) == Point(x=3, y=6)
    assert Geometry.instances == 1  # two parameters, one deployment of Geometry


async def test_results_cross_the_wire_codec() -> None:
    with chains.run_local():
        entry = Entry()
        point = Point(x=1, y=1)
        result = await entry.echo.run_remote(point)
        assert result == point and result is not point
        # Arguments are validated like a request body: a dict becomes the model.
        assert await entry.geometry.run_remote({"x": 2, "y": 2}, 2) == Point(x=4, y=4)


async def test_without_serialize_values_pass_through() -> None:
    with chains.run_local(serialize=False):
        entry = Entry()
        point = Point(x=1, y=1)
        assert await entry.echo.run_remote(point) is point


async def test_bad_arguments_fail_like_a_422() -> None:
    with chains.run_local():
        entry = Entry()
        with pytest.raises(pydantic.ValidationError, match="GeometryInput"):
            await entry.geometry.run_remote(Point(x=1, y=1), scale="many")
        with pytest.raises(TypeError, match=r"Geometry.run_remote\(\): missing a required argument: 'p'"):
            await entry.geometry.run_remote()


async def test_wrong_result_type_fails_as_a_remote_error() -> None:
    with chains.run_local():
        entry = Entry()
        assert await entry.lies.run_remote("int") == 3
        with pytest.raises(chains.RemoteError, match="valid integer"):
            await entry.lies.run_remote("str")


async def test_values_that_cannot_be_serialized_fail_here_not_after_deploying() -> None:
    with chains.run_local(), pytest.raises(chains.RemoteError, match="utf-8"):
        await Entry().blobs.run_remote()
    with chains.run_local(serialize=False):
        assert (await Entry().blobs.run_remote()).data == b"\xff\x00"


async def test_remote_exceptions_keep_their_builtin_type() -> None:
    with chains.run_local(), pytest.raises(ValueError, match="scale must be >= 0") as info:
        await Entry().geometry.run_remote(Point(x=1, y=1), scale=-1)
    assert isinstance(info.value, chains.RemoteError)
    assert info.value.detail is not None and info.value.detail.chainlet == "Geometry"


def test_sync_dependency_is_called_synchronously() -> None:
    with chains.run_local():
        assert Entry().syncy.run_remote(1) == 2


async def test_concurrency_limit_and_timeout() -> None:
    Slow.peak = 0
    with chains.run_local():
        slow = Entry().slow
        assert await asyncio.gather(*(slow.run_remote(0.02) for _ in range(6))) == [0.02] * 6
        assert Slow.peak == 2
        with pytest.raises(chains.DeadlineExceeded, match=r"timeout_sec=0\.5"):
            await slow.run_remote(5)


async def test_context_and_secrets() -> None:
    with chains.run_local(secrets={"api_key": "k-123", "other": "no"}):
        secretive = Entry().secretive
        assert await secretive.run_remote("api_key") == "k-123"
        with pytest.raises(chains.RemoteError, match=r"not declared by chainlet 'Secretive'"):
            await secretive.run_remote("other")


def test_run_local_ends_with_its_block() -> None:
    with chains.run_local():
        Entry()
    with pytest.raises(chains.ChainsRuntimeError, match="cannot be constructed directly"):
        Entry()


class BinaryCaller(chains.ChainletBase):
    def __init__(
        self,
        packed: Blobs = chains.depends(Blobs, use_binary=True),
        plain: Blobs = chains.depends(Blobs),
    ) -> None:
        self.packed, self.plain = packed, plain

    async def run_remote(self) -> int:
        return 0


async def test_use_binary_carries_bytes_json_cannot() -> None:
    with chains.run_local():
        caller = BinaryCaller()
        assert (await caller.packed.run_remote()).data == b"\xff\x00"
        with pytest.raises(chains.RemoteError, match="utf-8"):
            await caller.plain.run_remote()


class PositionalOnly(chains.ChainletBase):
    async def run_remote(self, a: int, /, b: int = 2) -> int:
        return a * 10 + b


async def test_positional_only_parameters_are_passed_by_position() -> None:
    class Caller(chains.ChainletBase):
        def __init__(self, dep: PositionalOnly = chains.depends(PositionalOnly)) -> None:
            self.dep = dep

        async def run_remote(self) -> int:
            return await self.dep.run_remote(3, b=4)

    with chains.run_local():
        assert await Caller().run_remote() == 34
