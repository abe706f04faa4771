"""Compute(autoscale=...): the range and target a cluster scales a chainlet by."""

from __future__ import annotations

import pytest

import chains


def test_triple_and_model_are_the_same() -> None:
    short = chains.Compute(concurrency=32, autoscale=(2, 10, 16))
    long = chains.Compute(
        concurrency=32, autoscale=chains.Autoscale(min_replicas=2, max_replicas=10, target_concurrency=16)
    )
    assert short == long
    assert short.autoscale is not None and short.autoscale.max_replicas == 10
    assert chains.Compute().autoscale is None


@pytest.mark.parametrize(
    ("autoscale", "message"),
    [
        ((3, 2, 4), r"Autoscale\.max_replicas: max_replicas must be at least min_replicas \(3\)"),
        ((0, 2, 4), r"Autoscale\.min_replicas: Input should be greater than or equal to 1"),
        ((1, 2, 0), r"Autoscale\.target_concurrency: Input should be greater than or equal to 1"),
        ((1, 2), r"Compute\.autoscale: autoscale takes \(min_replicas, max_replicas, target_concurrency\)"),
        ((1, 4, 64), r"Compute\.autoscale: target_concurrency 64 is more than a replica serves at once"),
    ],
)
def test_bad_autoscale_names_the_field(autoscale: tuple[int, ...], message: str) -> None:
    with pytest.raises(chains.ChainsUsageError, match=message):
        chains.Compute(concurrency=32, autoscale=autoscale)  # type: ignore[arg-type]


def test_replicas_and_autoscale_exclude_each_other() -> None:
    with pytest.raises(
        chains.ChainsUsageError, match=r"Compute\.autoscale: set either replicas \(3\) or autoscale"
    ):
        chains.Compute(replicas=3, autoscale=(1, 4, 8))
    assert chains.Compute(replicas=1, autoscale=(1, 4, 8)).autoscale is not None


def test_autoscale_by_itself_validates() -> None:
    with pytest.raises(chains.ChainsUsageError, match=r"Autoscale\.max_replicas: Field required"):
        chains.Autoscale(target_concurrency=4)  # type: ignore[call-arg]
