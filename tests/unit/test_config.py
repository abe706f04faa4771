from __future__ import annotations

import pytest

import chains
from chains.config import parse_memory
from chains.context import Secrets


@pytest.mark.parametrize(
    ("text", "size"),
    [("512Mi", 512 * 2**20), ("2Gi", 2 * 2**30), ("1G", 10**9), ("1.5Gi", int(1.5 * 2**30)), ("100", 100)],
)
def test_memory_sizes(text: str, size: int) -> None:
    assert parse_memory(text) == size
    assert chains.Compute(memory=text).memory_bytes == size


@pytest.mark.parametrize("text", ["lots", "512MB", "-1Gi", "0", ""])
def test_bad_memory_names_the_field(text: str) -> None:
    with pytest.raises(chains.ChainsUsageError, match=r"Compute\.memory: .*(memory|more than zero)") as info:
        chains.Compute(memory=text)
    assert repr(text) in str(info.value)


def test_bad_values_name_class_and_field() -> None:
    with pytest.raises(
        chains.ChainsUsageError, match=r"Compute\.concurrency: Input should be greater than or equal to 1"
    ):
        chains.Compute(concurrency=0)
    with pytest.raises(chains.ChainsUsageError, match=r"Compute\.replicas"):
        chains.Compute(replicas=0)
    with pytest.raises(chains.ChainsUsageError, match=r"Compute\.cpu_count"):
        chains.Compute(cpu_count=-1)
    with pytest.raises(
        chains.ChainsUsageError, match=r"RemoteConfig\.compuet: unknown field; check its spelling"
    ):
        chains.RemoteConfig(compuet=chains.Compute())  # type: ignore[call-arg]
    with pytest.raises(chains.ChainsUsageError, match=r"Assets\.secret_keys: .*secret key 'bad key'"):
        chains.Assets(secret_keys=["bad key"])
    with pytest.raises(chains.ChainsUsageError, match=r"ChainletOptions\.env_variables: .*'1X'"):
        chains.ChainletOptions(env_variables={"1X": "v"})
    with pytest.raises(chains.ChainsUsageError, match=r"DockerImage\.pip_requirements"):
        chains.DockerImage(pip_requirements=[" "])


def test_gpus_name_their_type_and_count() -> None:
    compute = chains.Compute(gpu="A10G", gpu_count=2)
    assert (compute.gpu, compute.gpu_count) == ("A10G", 2)
    assert chains.Compute().gpu is None
    with pytest.raises(chains.ChainsUsageError, match=r"Compute\.gpu: 'A10 G' is not an accelerator type"):
        chains.Compute(gpu="A10 G")
    with pytest.raises(
        chains.ChainsUsageError, match=r"Compute\.gpu_count: gpu_count=2 needs the accelerator"
    ):
        chains.Compute(gpu_count=2)
    with pytest.raises(chains.ChainsUsageError, match=r"Compute\.gpu_count: Input should be greater"):
        chains.Compute(gpu="T4", gpu_count=0)


def test_config_is_frozen_and_has_defaults() -> None:
    config = chains.RemoteConfig()
    assert config.compute.concurrency == 32 and config.compute.replicas == 1
    with pytest.raises(Exception, match="frozen"):
        config.compute.concurrency = 3  # type: ignore[misc]


def test_secrets_refuse_undeclared_keys_and_hide_values() -> None:
    secrets = Secrets({"hf_token": "s3cret", "other": "x"}, ["hf_token", "missing"], chainlet="Gen")
    assert secrets["hf_token"] == "s3cret"
    assert dict(secrets) == {"hf_token": "s3cret"}
    with pytest.raises(
        chains.ChainsUsageError, match=r"not declared by chainlet 'Gen'.*secret_keys=\[\.\.\., 'other'\]"
    ):
        secrets["other"]
    with pytest.raises(KeyError, match="declared but has no value"):
        secrets["missing"]
    assert "s3cret" not in repr(secrets)
