from pathlib import Path

import pytest

import chains
from chains.loader import import_chain_file, load_chain

CHAIN = Path(__file__).with_name("chain.py")


def test_streaming_chain_checks_clean() -> None:
    chain = load_chain(CHAIN)
    kinds = {spec.name: spec.endpoint.output_kind.name for spec in chain.chainlets}
    assert kinds == {"Generator": "structured", "Words": "items", "Entry": "text"}


@pytest.mark.parametrize("serialize", [True, False])
async def test_entry_restreams_header_items_and_footer_as_text(serialize: bool) -> None:
    module, _ = import_chain_file(CHAIN)
    with chains.run_local(serialize=serialize):
        entry = module.Entry()
        pieces = [piece async for piece in entry.run_remote("hello streaming world", max_tokens=4)]
    assert pieces[0] == "[4 tokens for 'hello streaming world']"
    assert "".join(pieces[1:5]) == " hello streaming world hello"
    assert "".join(pieces[5:]) == '\n[usage: 4 tokens; {"tokens":4}]'


async def test_generator_frames_are_read_back_with_the_shared_stream_types() -> None:
    module, _ = import_chain_file(CHAIN)
    with chains.run_local():
        entry = module.Entry()
        reader = chains.stream_reader(module.TOKENS, entry._generator.run_remote("a b", 2))
        assert (await reader.read_header()).prompt == "a b"
        assert [t.text async for t in reader.read_items()] == ["a", "b"]
        assert (await reader.read_footer()).tokens == 2


async def test_a_structured_entrypoint_called_directly_is_a_complete_stream() -> None:
    # The pattern for testing a streaming chain with pytest: build the chainlet under
    # run_local and read its run_remote as its caller would, with the shared stream types.
    module, _ = import_chain_file(CHAIN)
    with chains.run_local():
        generator = module.Generator()
        reader = chains.stream_reader(module.TOKENS, generator.run_remote("x y z", 3))
        assert (await reader.read_header()).max_tokens == 3
        assert [t.index async for t in reader.read_items()] == [0, 1, 2]
        assert (await reader.read_footer()).tokens == 3
