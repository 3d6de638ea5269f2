"""The nearest-rank percentile every report uses."""

from agent.ledger.quantiles import percentile


def test_percentile_is_a_measured_value_by_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.95) == 95
    assert percentile(values, 1.0) == 100
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
