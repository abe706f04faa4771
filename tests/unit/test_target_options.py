"""Each target's own options type, built from the flags every target shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from chains.errors import ChainsUsageError
from chains.targets import (
    DockerOptions,
    KubernetesOptions,
    LocalOptions,
    PushOptions,
    RayOptions,
    TrussOptions,
    for_target,
    options_for,
)


def test_options_for_keeps_what_the_target_takes() -> None:
    given = {"entry_port": 8123, "base_image": "python:3.11-slim", "address": None, "registry": None}
    assert options_for("docker", timeout=5.0, **given) == DockerOptions(
        timeout=5.0, entry_port=8123, base_image="python:3.11-slim"
    )
    # The local target builds no image: the CLI's --base-image means nothing to it.
    assert options_for("local", **given) == LocalOptions(entry_port=8123)
    assert options_for("truss", out_dir=Path("out"), model_urls={"A": "http://a"}, entry_port=None) == (
        TrussOptions(out_dir=Path("out"), model_urls={"A": "http://a"})
    )


def test_a_port_on_ray_is_refused_not_ignored() -> None:
    with pytest.raises(ChainsUsageError, match="--port does not apply to the ray target"):
        options_for("ray", entry_port=8123)
    assert options_for("ray", entry_port=None, address="auto") == RayOptions(address="auto")


def test_for_target_widens_the_common_options_and_refuses_another_targets() -> None:
    common = PushOptions(
        secrets={"k": "v"}, timeout=7.0, api_key="key-123", cors_origins=("http://a.example",)
    )
    widened = for_target("kubernetes", common)
    assert widened == KubernetesOptions(
        secrets={"k": "v"}, timeout=7.0, api_key="key-123", cors_origins=("http://a.example",)
    )
    own = LocalOptions(entry_port=9000)
    assert for_target("local", own) is own
    with pytest.raises(ChainsUsageError, match="target 'docker' takes DockerOptions, not LocalOptions"):
        for_target("docker", own)
    with pytest.raises(ChainsUsageError, match="unknown target 'nowhere'"):
        options_for("nowhere")
