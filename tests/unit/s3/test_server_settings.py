"""How the gateway's process settings resolve (workers, GIL switch interval)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from crossbeat.cli.main import cli
from crossbeat.s3.server import effective_workers, switch_interval_s
from crossbeat.s3.settings import GatewaySettings, parse_listen


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


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("worker_threads", 0),
        ("workers", -1),
        ("max_object_bytes", -5),
        ("min_part_bytes", -1),
        ("small_object_bytes", -1),
        ("inline_object_bytes", -1),
        ("journal_poll_seconds", 0),
    ],
)
def test_a_setting_out_of_range_is_refused_by_name(tmp_path: Path, field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        GatewaySettings(data_dir=tmp_path, **{field: value})


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [("127.0.0.1:0", "127.0.0.1", 0), ("[::1]:9000", "::1", 9000), ("localhost:65535", "localhost", 65535)],
)
def test_listen_takes_host_and_port(tmp_path: Path, listen: str, host: str, port: int) -> None:
    assert GatewaySettings(data_dir=tmp_path, listen=listen).listen == listen
    assert parse_listen(listen) == (host, port)


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1:99999", ":8000", "127.0.0.1:", "h:-1", "h:8o"])
def test_a_bad_listen_address_is_refused_before_binding(tmp_path: Path, listen: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT with a port from 0 to 65535"):
        GatewaySettings(data_dir=tmp_path, listen=listen)


def test_the_cli_reports_a_bad_listen_address_without_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["gateway", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:99999"],
        env={"CROSSBEAT_ACCESS_KEY": "a", "CROSSBEAT_SECRET_KEY": "b"},
    )
    assert result.exit_code == 1
    assert "port from 0 to 65535" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())  # nothing was created


def test_lifecycle_settings_have_bounds(tmp_path: Path) -> None:
    settings = GatewaySettings(data_dir=tmp_path)
    assert (settings.lifecycle_interval_seconds, settings.lifecycle_day_seconds) == (3600, 86400)
    assert GatewaySettings(data_dir=tmp_path, lifecycle_interval_seconds=0).lifecycle_interval_seconds == 0
    for bad in ({"lifecycle_interval_seconds": -1}, {"lifecycle_day_seconds": 0.5},
                {"lifecycle_day_seconds": 86401}):
        with pytest.raises(ValueError, match="lifecycle"):
            GatewaySettings(data_dir=tmp_path, **bad)
