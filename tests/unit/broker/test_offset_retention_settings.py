"""The offset retention settings: Kafka's defaults, bounded below, set by env like the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.broker.settings import BrokerSettings


def test_defaults_are_kafkas(tmp_path: Path) -> None:
    settings = BrokerSettings(data_dir=tmp_path)
    assert settings.offsets_retention_ms == 10080 * 60 * 1000  # offsets.retention.minutes
    assert settings.offsets_retention_check_interval_ms == 600_000


@pytest.mark.parametrize("name", ["offsets_retention_ms", "offsets_retention_check_interval_ms"])
def test_below_100_ms_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        BrokerSettings(data_dir=tmp_path, **{name: 99})  # type: ignore[arg-type]


def test_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBEAT_BROKER_OFFSETS_RETENTION_MS", "500")
    monkeypatch.setenv("CROSSBEAT_BROKER_OFFSETS_RETENTION_CHECK_INTERVAL_MS", "100")
    settings = BrokerSettings(data_dir=tmp_path)
    assert (settings.offsets_retention_ms, settings.offsets_retention_check_interval_ms) == (
        500, 100)
