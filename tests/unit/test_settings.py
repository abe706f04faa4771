"""Server settings from CHAINS_* variables: dependency addresses, and errors naming what is wrong."""

from __future__ import annotations

import json

import pytest

from chains.errors import ChainsUsageError
from chains.server.settings import DependencyAddress, ServerSettings


def settings(urls: object, **env: str) -> ServerSettings:
    return ServerSettings.from_env({"CHAINS_DEPENDENCY_URLS": json.dumps(urls), **env})


def test_a_list_of_urls_is_the_chain_s_own_route_and_token() -> None:
    address = settings({"Leaf": ["http://127.0.0.1:8001/", "http://127.0.0.1:8002"]}).dependencies["Leaf"]
    assert address == DependencyAddress(("http://127.0.0.1:8001", "http://127.0.0.1:8002"))
    assert address.path == "/run_remote" and address.auth_secret is None


def test_an_address_names_its_path_and_the_secret_its_credential_is_in() -> None:
    address = settings(
        {
            "Leaf": {
                "urls": ["https://model-abc.example"],
                "path": "/environments/production/predict",
                "auth": {"scheme": "Api-Key", "secret": "gateway_key"},
            }
        }
    ).dependencies["Leaf"]
    assert address == DependencyAddress(
        ("https://model-abc.example",), "/environments/production/predict", "Api-Key", "gateway_key"
    )


def test_an_address_without_auth_keeps_the_chain_token() -> None:
    address = settings({"Leaf": {"urls": ["http://h:1"], "path": "/x"}}).dependencies["Leaf"]
    assert (address.path, address.auth_scheme, address.auth_secret) == ("/x", "Bearer", None)


@pytest.mark.parametrize(
    ("urls", "message"),
    [
        ("not json", "must be a JSON object"),
        (["http://h:1"], "must be a JSON object"),
        ({"Leaf": []}, r"CHAINS_DEPENDENCY_URLS\['Leaf'\]: urls must be a non-empty list"),
        ({"Leaf": "http://h:1"}, r"urls must be a non-empty list of URLs, got 'http://h:1'"),
        ({"Leaf": ["h:1"]}, r"'h:1' is not an http:// or https:// URL"),
        ({"Leaf": {"urls": ["http://h:1"], "pth": "/x"}}, r"unknown key\(s\) \['pth'\]"),
        ({"Leaf": {"urls": ["http://h:1"], "path": "x"}}, "path must be a string starting with '/'"),
        ({"Leaf": {"urls": ["http://h:1"], "auth": {"scheme": "Api-Key"}}}, "auth must be"),
        ({"Leaf": {"urls": ["http://h:1"], "auth": {"scheme": "Api Key", "secret": "k"}}}, "auth scheme"),
        ({"Leaf": {"urls": ["http://h:1"], "auth": {"scheme": "Api-Key", "secret": ""}}}, "name a secret"),
    ],
)
def test_a_malformed_address_is_refused_naming_the_fault(urls: object, message: str) -> None:
    raw = urls if isinstance(urls, str) else json.dumps(urls)
    with pytest.raises(ChainsUsageError, match=message):
        ServerSettings.from_env({"CHAINS_DEPENDENCY_URLS": raw})


def test_repr_shows_dependencies_but_no_credentials() -> None:
    text = repr(settings({"Leaf": ["http://h:1"]}, CHAINS_INTERNAL_TOKEN="tok-123", CHAINS_SECRET_k="v-456"))
    assert "Leaf" in text and "tok-123" not in text and "v-456" not in text
