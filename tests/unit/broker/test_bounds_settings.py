"""The broker's `fetch_max_bytes` and `connections_max_idle_ms`: Kafka's defaults, and the
values that could not work are refused, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.broker.settings import BrokerSettings


def test_defaults_are_kafkas(tmp_path: Path) -> None:
    settings = BrokerSettings(data_dir=tmp_path)
    assert settings.fetch_max_bytes == 57_671_680  # fetch.max.bytes: 55 MiB
    assert settings.connections_max_idle_ms == 600_000  # connections.max.idle.ms: 10 min


def test_idle_timeout_is_never_or_at_least_100_ms(tmp_path: Path) -> None:
    assert BrokerSettings(data_dir=tmp_path, connections_max_idle_ms=-1).connections_max_idle_ms == -1
    assert BrokerSettings(data_dir=tmp_path, connections_max_idle_ms=100).connections_max_idle_ms == 100
    for bad in (0, 99, -2):
        with pytest.raises(ValueError, match="connections_max_idle_ms"):
            BrokerSettings(data_dir=tmp_path, connections_max_idle_ms=bad)


def test_fetch_max_bytes_is_at_least_1_kib(tmp_path: Path) -> None:
    assert BrokerSettings(data_dir=tmp_path, fetch_max_bytes=1024).fetch_max_bytes == 1024
    with pytest.raises(ValueError, match="fetch_max_bytes"):
        BrokerSettings(data_dir=tmp_path, fetch_max_bytes=1023)
