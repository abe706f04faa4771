"""chains.push from Python: a handle to a running chain, usable as a context manager."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import chains
from chains.loader import import_chain_file
from chains.targets.state import pid_alive

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAINS_HOME", str(tmp_path / "home"))


def test_push_a_class_call_it_and_stop_on_exit() -> None:
    module, _ = import_chain_file(ROOT / "examples" / "hello" / "chain.py")
    with chains.push(module.Hello, name="api-hello") as chain:
        assert chain.name == "api-hello" and chain.target == "local"
        assert set(chain.chainlets) == {"Hello", "Greeter"}
        assert chain.call(names=["Ada"]) == ["Hello, Ada!"]
        pids = [p.pid for p in chain.state.processes]
    assert not any(pid_alive(pid) for pid in pids)


def test_the_handle_is_called_from_many_threads_at_once() -> None:
    module, _ = import_chain_file(ROOT / "examples" / "hello" / "chain.py")
    names = [f"n{i}" for i in range(16)]
    with chains.push(module.Hello, name="api-threads") as chain:
        assert chain.call(names=["warm"]) == ["Hello, warm!"]  # a call before, from this thread
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda name: chain.call(names=[name]), names))
    assert answers == [[f"Hello, {name}!"] for name in names]


def test_push_a_file_and_collect_a_stream() -> None:
    with chains.push(ROOT / "examples" / "streaming" / "chain.py") as chain:
        pieces = chain.call(prompt="a b", max_tokens=2)
    assert "".join(pieces) == "[2 tokens for 'a b'] a b\n[usage: 2 tokens; {\"tokens\":2}]"


def test_a_push_that_fails_raises_and_leaves_nothing(tmp_path: Path) -> None:
    file = tmp_path / "bad.py"
    file.write_text(
        "import chains\n\n\n@chains.mark_entrypoint\nclass Bad(chains.ChainletBase):\n"
        "    def __init__(self) -> None:\n        raise OSError('no GPU here')\n\n"
        "    async def run_remote(self) -> int:\n        return 1\n"
    )
    with pytest.raises(chains.ChainsRuntimeError, match="chainlet Bad failed to start") as info:
        chains.push(file)
    assert "OSError: no GPU here" in str(info.value)


def test_a_structured_stream_is_returned_typed() -> None:
    module, _ = import_chain_file(ROOT / "examples" / "streaming" / "chain.py")
    with chains.push(module.Generator, name="api-typed") as chain:
        answer = chain.call(prompt="a b c", max_tokens=3)
    assert isinstance(answer, chains.StreamContents)
    # Typed by the stream's own types (the chain file's, as the push loaded it).
    assert answer.header.model_dump() == {"prompt": "a b c", "max_tokens": 3}
    assert [(token.text, token.index) for token in answer.items] == [("a", 0), ("b", 1), ("c", 2)]
    assert type(answer.items[0]).__name__ == "Token"
    assert answer.footer.model_dump() == {"tokens": 3}
