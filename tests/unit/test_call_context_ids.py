"""Request ids: random in every bit a trace sampler reads."""

from chains.call_context import new_request_id


def test_request_ids_leave_the_trace_ids_low_half_random() -> None:
    # TraceIdRatioBased keeps a trace when its low 64 bits are under ratio * 2**64: with a
    # UUID's variant bits set, every id was at least 2**63 and ratios up to 0.5 kept nothing.
    low_halves = [int(new_request_id(), 16) & (2**64 - 1) for _ in range(200)]
    assert any(low < 2**62 for low in low_halves)
    assert all(len(new_request_id()) == 32 for _ in range(10))
