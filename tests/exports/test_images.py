"""Image names: one function for every target, valid references for any chain and chainlet name."""

from __future__ import annotations

import re

import pytest

from chains.errors import ChainsUsageError
from chains.targets.images import image_name, image_repository, normalize_registry

# The reference grammar of the OCI distribution spec (repository path and tag).
REFERENCE = re.compile(
    r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
)


@pytest.mark.parametrize("chainlet", ["Greeter", "Text_Gen", "text-gen-", "A__B", "x_-_y", "Émoji", "g.1"])
@pytest.mark.parametrize("chain", ["hello", "My_Chain", "rich_chain"])
def test_every_name_gives_a_valid_reference(chain: str, chainlet: str) -> None:
    for registry in (None, "ghcr.io/my-org", "localhost:5000", "team"):
        assert REFERENCE.match(image_name(chain, chainlet, "ab12" * 16, registry))


def test_naming() -> None:
    assert image_name("hello", "Greeter", "v1") == "chains/hello-greeter:v1"
    assert (
        image_name("hello", "Greeter", "v1", "registry.example/team/")
        == "registry.example/team/hello-greeter:v1"
    )
    assert image_repository("My_Chain", "Text-Gen_") == "chains/my_chain-text-gen"


@pytest.mark.parametrize("registry", ["Team", "a b", "ghcr.io/Org", "https://ghcr.io/org"])
def test_bad_registry_is_a_usage_error(registry: str) -> None:
    with pytest.raises(ChainsUsageError, match=r"--registry .* is not an image prefix"):
        normalize_registry(registry)


def test_bad_tag_is_a_usage_error() -> None:
    with pytest.raises(ChainsUsageError, match="cannot be an image tag"):
        image_name("hello", "Greeter", "not a tag")
