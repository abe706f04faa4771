"""The stubs' backoff between retries, once every replica has been tried."""

from __future__ import annotations

import pytest
import tenacity

from chains.rpc_options import StubOptions
from chains.stubs.policy import CallPolicy


@pytest.mark.parametrize(
    ("attempt", "least"), [(1, 0.05), (2, 0.1), (3, 0.2), (6, 1.6), (7, 2.0), (200, 2.0)]
)
def test_the_backoff_doubles_from_50_ms_with_50_ms_of_jitter_and_stops_at_2_s(
    attempt: int, least: float
) -> None:
    url = "http://127.0.0.1:9"
    policy = CallPolicy("Words", [url], StubOptions(retries=3))
    state = tenacity.RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    waits = [policy._wait(state, tried=[url]) for _ in range(500)]
    assert least <= min(waits) and max(waits) <= min(least + 0.05, 2.0)
    if least < 2.0:  # the jitter spreads the waits of callers that failed together
        assert max(waits) - min(waits) > 0.025
