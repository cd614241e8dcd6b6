"""How long a failed pipeline query waits before its restart."""

from __future__ import annotations

from crossbeat.spark.pipelines import MAX_RESTART_DELAY_S, restart_delay


def test_restart_delay_doubles_from_the_base_up_to_the_cap() -> None:
    assert [restart_delay(n, 2.0) for n in range(1, 9)] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert restart_delay(10_000, 2.0) == MAX_RESTART_DELAY_S  # no overflow after days of failing
    assert restart_delay(3, 0.5, cap=1.0) == 1.0
