"""How the gateway's process settings resolve (workers, GIL switch interval)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.s3.server import effective_workers, switch_interval_s
from crossbeat.s3.settings import GatewaySettings


def test_one_process_switches_the_gil_sooner_than_several(tmp_path: Path) -> None:
    one = GatewaySettings(data_dir=tmp_path, workers=1)
    several = GatewaySettings(data_dir=tmp_path, workers=3)
    assert effective_workers(one) == 1 and effective_workers(several) == 3
    assert switch_interval_s(one) == pytest.approx(0.0005)
    assert switch_interval_s(several) == pytest.approx(0.005)


def test_an_explicit_switch_interval_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert switch_interval_s(GatewaySettings(data_dir=tmp_path, workers=1,
                                             gil_switch_interval_ms=2)) == pytest.approx(0.002)
    monkeypatch.setenv("CROSSBEAT_GIL_SWITCH_INTERVAL_MS", "1.5")
    assert switch_interval_s(GatewaySettings(data_dir=tmp_path, workers=4)) == pytest.approx(0.0015)


def test_a_switch_interval_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gil_switch_interval_ms"):
        GatewaySettings(data_dir=tmp_path, gil_switch_interval_ms=0)
