"""BrokerSettings refuses what the broker could not serve, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.broker.settings import BrokerSettings


def test_defaults_validate(tmp_path: Path) -> None:
    settings = BrokerSettings(data_dir=tmp_path)
    assert settings.group_min_session_timeout_ms <= settings.group_max_session_timeout_ms


@pytest.mark.parametrize(
    ("listen", "message"),
    [("127.0.0.1:99999", "out of range"), ("127.0.0.1:x", "not a number"), (":9092", "no host")],
)
def test_a_bad_listen_address_is_refused(tmp_path: Path, listen: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BrokerSettings(data_dir=tmp_path, listen=listen)


def test_session_timeout_bounds_must_be_positive_and_in_order(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="group_min_session_timeout_ms"):
        BrokerSettings(data_dir=tmp_path, group_min_session_timeout_ms=0)
    with pytest.raises(ValueError, match=r"group_min_session_timeout_ms \(6000\) is above"):
        BrokerSettings(data_dir=tmp_path, group_min_session_timeout_ms=6000,
                       group_max_session_timeout_ms=5000)
    both = BrokerSettings(data_dir=tmp_path, group_min_session_timeout_ms=5000,
                          group_max_session_timeout_ms=5000)
    assert both.group_max_session_timeout_ms == 5000


def test_consumer_group_heartbeat_must_be_below_its_session_timeout(tmp_path: Path) -> None:
    settings = BrokerSettings(data_dir=tmp_path)
    assert (settings.group_consumer_heartbeat_interval_ms,
            settings.group_consumer_session_timeout_ms) == (5000, 45000)  # Kafka's defaults
    with pytest.raises(ValueError, match=r"group_consumer_heartbeat_interval_ms \(3000\) must"):
        BrokerSettings(data_dir=tmp_path, group_consumer_heartbeat_interval_ms=3000,
                       group_consumer_session_timeout_ms=3000)
