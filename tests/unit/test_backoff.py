"""The call policy every caller shares (chains.call_policy): backoff, Retry-After, deadlines."""

from __future__ import annotations

import email.utils
import time

import pytest

from chains.call_policy import check_wait, retry_after_seconds, wait_before_retry
from chains.errors import DeadlineExceeded


@pytest.mark.parametrize(("retry", "least"), [(1, 0.05), (2, 0.1), (3, 0.2), (6, 1.6), (7, 2.0), (200, 2.0)])
def test_the_backoff_doubles_from_50_ms_with_50_ms_of_jitter_and_stops_at_2_s(
    retry: int, least: float
) -> None:
    waits = [wait_before_retry(retry, retry_after=None, other_replica=False) for _ in range(500)]
    assert least <= min(waits) and max(waits) <= min(least + 0.05, 2.0)
    if least < 2.0:  # the jitter spreads the waits of callers that failed together
        assert max(waits) - min(waits) > 0.025


def test_another_replica_is_tried_at_once_and_retry_after_is_a_floor() -> None:
    assert wait_before_retry(3, retry_after=30.0, other_replica=True) == 0.0
    assert wait_before_retry(1, retry_after=1.5, other_replica=False) == 1.5


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 0.25 ") == 0.25
    assert retry_after_seconds("-4") == 0.0
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8.0 <= (retry_after_seconds(in_ten) or 0.0) <= 10.0
    assert retry_after_seconds(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_no_wait_may_end_past_the_callers_deadline() -> None:
    check_wait("Words", 0.5, None)
    check_wait("Words", 0.5, 0.6)
    with pytest.raises(DeadlineExceeded, match="next retry would start after the caller's deadline"):
        check_wait("Words", 0.5, 0.4)
