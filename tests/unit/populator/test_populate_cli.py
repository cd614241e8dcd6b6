"""Bad input to the populator and replication commands: a clear error, nothing started."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from crossbeat.cli.main import cli


def test_unknown_extension_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[populator]\nextensions = ["replication", "nosuch"]\nbrokers = "127.0.0.1:1"\n')
    result = CliRunner().invoke(cli, ["populate", "--config", str(cfg)])
    assert result.exit_code != 0
    assert "unknown extension 'nosuch'" in result.output


def test_invalid_extension_section_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[extensions.replication]\nconcurrency = -1\n")
    result = CliRunner().invoke(cli, ["populate", "--config", str(cfg)])
    assert result.exit_code != 0
    assert "[extensions.replication]" in result.output


def test_replication_retry_needs_all_or_one_version() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["replication", "retry"]).exit_code == 2
    assert runner.invoke(cli, ["replication", "retry", "--all", "b", "k", "v"]).exit_code == 2
    assert runner.invoke(cli, ["replication", "retry", "b", "k"]).exit_code == 2


def test_pausing_an_unknown_site_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[extensions.replication.sites.b]\nendpoint = "http://127.0.0.1:1"\n')
    result = CliRunner().invoke(cli, ["replication", "--config", str(cfg), "pause", "zz"])
    assert result.exit_code != 0
    assert "unknown replication site 'zz'" in result.output


def test_unknown_pipeline_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["pipeline", "nope"])
    assert result.exit_code == 2
