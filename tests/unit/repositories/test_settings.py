"""RepositorySettings validation, open_repositories and Location's JSON form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from crossbeat.config import section_settings
from crossbeat.errors import ConfigError
from crossbeat.repositories import (
    Location,
    ProxyRepository,
    RepositoryError,
    RepositorySettings,
    SfsRepository,
    cleanup_repositories,
    open_repositories,
)


def test_location_json_round_trip() -> None:
    loc = Location("default", "abc123", 42)
    assert loc.to_json() == {"location": "default", "dataKey": "abc123", "size": 42}
    assert Location.from_json(loc.to_json()) == loc
    bads: list[dict[str, Any]] = [
        {},
        {"location": "a", "dataKey": "b"},
        {"location": 1, "dataKey": "b", "size": 1},
        {"location": "a", "dataKey": "b", "size": -1},
        {"location": "a", "dataKey": "b", "size": True},
    ]
    for bad in bads:
        with pytest.raises(RepositoryError):
            Location.from_json(bad)


def test_defaults_to_one_sfs_repository_in_the_data_dir(tmp_path: Path) -> None:
    repos = open_repositories({}, tmp_path)
    assert list(repos) == ["default"]
    repo = repos["default"]
    assert isinstance(repo, SfsRepository)
    assert repo.root == tmp_path / "repositories" / "default"
    assert repo.chunk_size == 4 * 1024 * 1024


def test_sfs_settings(tmp_path: Path) -> None:
    key = "00112233445566778899aabbccddeeff"
    repos = open_repositories(
        {
            "rel": RepositorySettings(
                type="sfs", root=Path("here"), chunk_size=1000, siphash_key=key
            ),
            "abs": RepositorySettings(type="sfs", root=tmp_path / "elsewhere"),
        },
        tmp_path / "data",
    )
    rel, absolute = repos["rel"], repos["abs"]
    assert isinstance(rel, SfsRepository) and isinstance(absolute, SfsRepository)
    assert rel.root == tmp_path / "data" / "here" and rel.chunk_size == 1000
    assert rel.siphash_key == bytes.fromhex(key)
    assert absolute.root == tmp_path / "elsewhere"


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "ftp"},
        {"type": "sfs", "chunk_size": 0},
        {"type": "sfs", "siphash_key": "abcd"},
        {"type": "sfs", "siphash_key": "zz" * 16},
        {"type": "sfs", "rooot": "typo"},
        {"type": "s3"},
        {"type": "proxy", "backends": []},
        {"type": "proxy", "backends": ["a"], "preferred_backend": "b"},
        {"type": "proxy", "backends": ["a", "a"], "preferred_backend": "a"},
    ],
)
def test_bad_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RepositorySettings(**fields)  # type: ignore[arg-type]


def test_settings_from_toml_section() -> None:
    doc = {"repo": {"type": "s3", "bucket": "b", "secret_key": "hush", "endpoint_url": "http://x"}}
    settings = section_settings(RepositorySettings, doc, "repo")
    assert settings.secret_key is not None and settings.secret_key.get_secret_value() == "hush"
    assert "hush" not in repr(settings)
    with pytest.raises(ConfigError):
        section_settings(RepositorySettings, {"repo": {"type": "s3"}}, "repo")


def test_proxy_takes_precedence_over_its_backends(tmp_path: Path) -> None:
    repos = open_repositories(
        {
            "old": RepositorySettings(type="sfs"),
            "new": RepositorySettings(type="sfs"),
            "migrate": RepositorySettings(
                type="proxy", backends=["old", "new"], preferred_backend="new"
            ),
        },
        tmp_path,
    )
    proxy = repos["migrate"]
    assert isinstance(proxy, ProxyRepository)
    assert repos["old"] is proxy and repos["new"] is proxy
    assert isinstance(proxy.backends["old"], SfsRepository)
    loc = repos["old"].put_bytes(b"x")
    assert loc.location == "new"
    assert repos[loc.location].read_bytes(loc.dataKey) == b"x"


@pytest.mark.parametrize(
    "configs",
    [
        {"p": RepositorySettings(type="proxy", backends=["missing"], preferred_backend="missing")},
        {
            "a": RepositorySettings(type="sfs"),
            "p": RepositorySettings(type="proxy", backends=["a"], preferred_backend="a"),
            "q": RepositorySettings(type="proxy", backends=["a"], preferred_backend="a"),
        },
        {
            "a": RepositorySettings(type="sfs"),
            "p": RepositorySettings(type="proxy", backends=["a"], preferred_backend="a"),
            "q": RepositorySettings(type="proxy", backends=["p"], preferred_backend="p"),
        },
        {
            "a": RepositorySettings(type="sfs", root=Path("same")),
            "b": RepositorySettings(type="sfs", root=Path("same")),
        },
        {
            "a": RepositorySettings(type="sfs", root=Path("outer")),
            "b": RepositorySettings(type="sfs", root=Path("outer/inner")),
        },
    ],
)
def test_bad_proxy_wiring_is_refused(
    tmp_path: Path, configs: dict[str, RepositorySettings]
) -> None:
    with pytest.raises(RepositoryError):
        open_repositories(configs, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing opened, nothing created


def test_s3_settings_open_an_s3_repository(s3_settings: RepositorySettings, tmp_path: Path) -> None:
    repos = open_repositories({"cloud": s3_settings}, tmp_path)
    loc = repos["cloud"].put_bytes(b"to the cloud")
    assert repos["cloud"].read_bytes(loc.dataKey) == b"to the cloud"
    repos["cloud"].close()


def test_cleanup_with_a_proxy_keeps_data_referenced_under_any_name(tmp_path: Path) -> None:
    repos = open_repositories(
        {
            "old": RepositorySettings(type="sfs"),
            "new": RepositorySettings(type="sfs"),
            "migrate": RepositorySettings(
                type="proxy", backends=["old", "new"], preferred_backend="new"
            ),
        },
        tmp_path,
    )
    proxy = repos["migrate"]
    assert isinstance(proxy, ProxyRepository)
    in_old = proxy.backends["old"].put_bytes(b"old").dataKey
    in_new = repos["old"].put_bytes(b"new").dataKey  # written through the proxy: "new"
    orphan = repos["new"].put_bytes(b"orphan").dataKey
    refs = {("old", in_old), ("new", in_new)}
    removed = cleanup_repositories(repos, lambda name, key: (name, key) in refs, older_than_s=0)
    assert removed == [orphan]
    assert repos["old"].read_bytes(in_old) == b"old"
    assert repos["new"].read_bytes(in_new) == b"new"
