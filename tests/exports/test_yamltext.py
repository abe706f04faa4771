"""The YAML writer: what PyYAML reads back is what was written, for any JSON-like data."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chains.targets.yamltext import dump, dump_all

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
data = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(data)
def test_round_trip(value: Any) -> None:
    assert yaml.safe_load(dump(value)) == value


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(), scalars, min_size=1), min_size=1, max_size=3),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)
def test_documents_and_header(values: list[dict[str, Any]], comment: str) -> None:
    text = dump_all(values, header=comment)
    assert list(yaml.safe_load_all(text)) == values


def test_ambiguous_strings_are_quoted() -> None:
    for word in ["on", "No", "true", "null", "1", "0x1F", "1e3", "12:30", "- a", "a: b", "#x", "", " a", "~"]:
        assert yaml.safe_load(dump({"k": word})) == {"k": word}
    assert dump({"image": "chains/x-y", "port": 8000}) == "image: chains/x-y\nport: 8000\n"
    # A trailing newline, in a key or a value, is quoted (a regex `$` would let it through bare).
    assert yaml.safe_load(dump({"A\n": "b\n", "": None})) == {"A\n": "b\n", "": None}
    assert dump({"a\n": 1}) == '"a\\u000a": 1\n'
