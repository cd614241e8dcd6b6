"""Settings precedence (ARCHITECTURE.md, Settings): CLI flags, then `CROSSBEAT_…`
environment variables, then the TOML file, then the models' defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossbeat.config import load_toml, section_settings
from crossbeat.errors import ConfigError
from crossbeat.metadata.settings import MetadataSettings
from crossbeat.s3.settings import GatewaySettings


@pytest.fixture
def document(tmp_path: Path) -> dict:
    path = tmp_path / "crossbeat.toml"
    path.write_text(
        '[gateway]\nregion = "from-file"\nchunk_size = 1024\n'
        '[[gateway.users]]\naccess_key = "FILEUSER"\nsecret_key = "file-secret"\n'
    )
    return load_toml(path)


def test_the_file_wins_over_the_defaults(document: dict) -> None:
    settings = section_settings(GatewaySettings, document, "gateway")
    assert settings.region == "from-file"
    assert settings.chunk_size == 1024
    assert settings.site == "a"  # default, in neither


def test_the_environment_overrides_the_file(document: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBEAT_REGION", "from-env")
    monkeypatch.setenv("CROSSBEAT_USERS", '[{"access_key": "ENVUSER", "secret_key": "s"}]')
    settings = section_settings(GatewaySettings, document, "gateway")
    assert settings.region == "from-env"
    assert [u.access_key for u in settings.users] == ["ENVUSER"]
    assert settings.chunk_size == 1024  # not in the environment: the file's value stands


def test_cli_flags_override_the_environment(document: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBEAT_REGION", "from-env")
    monkeypatch.setenv("CROSSBEAT_SITE", "env-site")
    settings = section_settings(GatewaySettings, document, "gateway", region="from-flag", site=None)
    assert settings.region == "from-flag"
    assert settings.site == "env-site"  # an unset flag (None) falls through to the environment


def test_a_bad_environment_value_is_a_clear_error(document: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBEAT_CHUNK_SIZE", "lots")
    with pytest.raises(ConfigError, match=r"(?s)invalid \[gateway\] settings.*chunk_size") as exc:
        section_settings(GatewaySettings, document, "gateway")
    # which variable, and what it held; none of pydantic's boilerplate
    assert "(from CROSSBEAT_CHUNK_SIZE)" in str(exc.value) and "'lots'" in str(exc.value)
    assert "errors.pydantic.dev" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"region \(from the command line\)"):
        section_settings(GatewaySettings, {}, "gateway", region=5)


def test_malformed_json_in_the_environment_is_a_clear_error(
    document: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CROSSBEAT_USERS", "[{not json")
    with pytest.raises(ConfigError, match=r"(?s)invalid \[gateway\] settings.*users.*take JSON"):
        section_settings(GatewaySettings, document, "gateway")


def test_a_component_prefix_only_reads_its_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROSSBEAT_METADATA_MAX_BATCH", "64")
    monkeypatch.setenv("CROSSBEAT_REGION", "from-env")  # the gateway's: the store forbids extras
    settings = section_settings(MetadataSettings, {"metadata": {"max_batch": 8}}, "metadata")
    assert settings.max_batch == 64


def test_a_misspelt_setting_in_the_file_is_an_error_naming_it() -> None:
    """It was ignored without a word: `chunk_sise = 5` left the chunk size at its default."""
    with pytest.raises(ConfigError, match=r"unknown setting in \[gateway\]: chunk_sise .*chunk_size"):
        section_settings(GatewaySettings, {"gateway": {"chunk_sise": 5}}, "gateway")
    with pytest.raises(ConfigError, match=r"unknown settings in \[gateway\]: a, b"):
        section_settings(GatewaySettings, {"gateway": {"a": 1, "b": 2, "region": "x"}}, "gateway")


def test_a_section_that_is_not_a_table_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"\[gateway\] must be a table"):
        section_settings(GatewaySettings, {"gateway": 5}, "gateway")


def test_an_unreadable_config_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_toml(tmp_path)  # a directory
    (tmp_path / "bin.toml").write_bytes(b"\x00\xff")
    with pytest.raises(ConfigError, match="bin.toml is not valid TOML"):
        load_toml(tmp_path / "bin.toml")
