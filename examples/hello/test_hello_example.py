from pathlib import Path

import chains
from chains.loader import import_chain_file, load_chain

CHAIN = Path(__file__).with_name("chain.py")


def test_hello_chain_checks_clean() -> None:
    chain = load_chain(CHAIN)
    assert chain.name == "hello"
    assert [spec.name for spec in chain.chainlets] == ["Greeter", "Hello"]


async def test_hello_fans_out_through_the_dependency() -> None:
    module, _ = import_chain_file(CHAIN)
    with chains.run_local():
        hello = module.Hello()
        assert await hello.run_remote(["Ada", "Grace"]) == ["Hello, Ada!", "Hello, Grace!"]


async def test_hello_with_a_fake_greeter() -> None:
    module, _ = import_chain_file(CHAIN)

    class FakeGreeter:
        async def run_remote(self, name: str) -> str:
            return name.upper()

    with chains.run_local():
        hello = module.Hello(greeter=FakeGreeter())
        assert await hello.run_remote(["ada"]) == ["ADA"]
