"""The dashboard's metrics: a chainlet's /metrics text read, and the bounded history of rates."""

from __future__ import annotations

import pytest

from chains.metrics import Metrics
from chains.ui.history import Counters, MetricsHistory, parse_metrics


def test_parse_reads_what_a_chainlet_renders() -> None:
    metrics = Metrics("Words")
    metrics.call_finished(200, 0.010)
    metrics.call_finished(200, 0.030)
    metrics.call_finished(503, 0.002)
    metrics.call_finished(500, 0.100)
    metrics.in_flight = 2
    metrics.dependency_started("Other")  # a dependency's samples are not the chainlet's own calls
    metrics.dependency_finished("Other", "ok", 5.0)
    counters = parse_metrics(metrics.render())
    assert counters.calls == 4
    assert counters.errors == 2
    assert counters.latency_count == 4
    assert counters.latency_sum == pytest.approx(0.142, abs=1e-6)
    assert counters.in_flight == 2


def test_parse_skips_comments_unknown_and_malformed_lines() -> None:
    text = (
        "# HELP chains_calls_total Calls served.\n"
        'chains_calls_total{status="200"} not-a-number\n'
        'chains_calls_total{status="200"} 7\n'
        "other_total 99\n"
        "garbage line\n"
    )
    assert parse_metrics(text) == Counters(calls=7)


def test_rates_are_deltas_over_the_interval_summed_across_replicas() -> None:
    history = MetricsHistory(keep=10)
    history.record_poll(
        100.0, [("A", "r0", Counters(calls=10, latency_sum=1.0, latency_count=10)), ("A", "r1", Counters())]
    )
    history.record_poll(
        102.0,
        [
            ("A", "r0", Counters(calls=14, errors=2, latency_sum=1.4, latency_count=14, in_flight=1)),
            ("A", "r1", Counters(calls=2, latency_sum=0.6, latency_count=2, in_flight=3)),
        ],
    )
    first, second = history.series()["A"]
    assert first.rate == 0 and first.latency_ms is None  # nothing to compare the first read with
    assert second.rate == pytest.approx((4 + 2) / 2.0)
    assert second.errors == pytest.approx(1.0)
    # (0.4 s + 0.6 s) over 6 calls that ended in the interval
    assert second.latency_ms == pytest.approx(1000 * 1.0 / 6)
    assert second.in_flight == 4


def test_a_restarted_process_counts_from_zero_instead_of_going_negative() -> None:
    history = MetricsHistory()
    history.record_poll(0.0, [("A", "r0", Counters(calls=50))])
    history.record_poll(1.0, [("A", "r0", Counters(calls=3))])
    assert history.series()["A"][-1].rate == 3.0


def test_a_replica_that_does_not_answer_leaves_the_others_counted() -> None:
    history = MetricsHistory()
    history.record_poll(0.0, [("A", "r0", Counters(calls=1)), ("A", "r1", Counters(calls=1))])
    history.record_poll(1.0, [("A", "r0", Counters(calls=5)), ("A", "r1", None)])
    assert history.series()["A"][-1].rate == 4.0
    history.record_poll(2.0, [("B", "r0", None)])
    assert history.series()["B"][-1].rate == 0.0


def test_history_keeps_only_the_last_points() -> None:
    history = MetricsHistory(keep=3)
    for second in range(10):
        history.record_poll(float(second), [("A", "r0", Counters(calls=second * 2))])
    points = history.series()["A"]
    assert [p.at for p in points] == [7.0, 8.0, 9.0]
    assert all(p.rate == 2.0 for p in points)
    last = {"at": 9.0, "rate": 2.0, "errors": 0.0, "latency_ms": None, "in_flight": 0.0}
    assert history.to_json()["A"][-1] == last


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        MetricsHistory(keep=0)


def test_a_replica_gone_from_a_poll_starts_afresh_when_it_is_back() -> None:
    history = MetricsHistory()
    history.record_poll(0.0, [("A", "r0", Counters(calls=1)), ("A", "r1", Counters(calls=1))])
    history.record_poll(1.0, [("A", "r0", Counters(calls=2))])  # r1 left the chain (a re-push)
    history.record_poll(2.0, [("A", "r0", Counters(calls=3)), ("A", "r1", Counters(calls=100))])
    # r1's 100 calls are not from this interval: its first read again has nothing to compare with.
    assert history.series()["A"][-1].rate == 1.0
