"""A proxy whose preferred member fails: reads of objects another member holds go on.

The preferred member is an s3 repository on a real S3 server (moto) behind a `SwitchProxy`
that can drop its connections; the other member is an sfs repository. A read of a location
goes to the member the location names first (no round trip to the preferred member), and
any error of a member passes to the next one, not only its absence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.repositories import Location, ProxyRepository, RepositoryError, new_object_id
from crossbeat.repositories.errors import RepositoryUnavailable
from crossbeat.repositories.s3 import S3Repository
from crossbeat.repositories.settings import RepositorySettings
from crossbeat.repositories.sfs import SfsRepository
from tests.support.faultproxy import SwitchProxy, switch_proxy


@pytest.fixture
def remote_proxy(s3_settings: RepositorySettings) -> Iterator[SwitchProxy]:
    assert s3_settings.endpoint_url is not None
    with switch_proxy(s3_settings.endpoint_url) as proxy:
        yield proxy


@pytest.fixture
def proxy(tmp_path: Path, s3_settings: RepositorySettings, remote_proxy: SwitchProxy) -> Iterator[ProxyRepository]:
    settings = s3_settings.model_copy(
        update={"endpoint_url": remote_proxy.url, "connect_timeout_s": 1, "read_timeout_s": 1, "max_attempts": 1}
    )
    remote = S3Repository.from_settings("remote", settings, owner="me")
    local = SfsRepository("local", tmp_path / "sfs", chunk_size=1024)
    repo = ProxyRepository("mig", {"remote": remote, "local": local}, "remote")
    yield repo
    repo.close()


def test_a_location_is_read_from_its_member_first(proxy: ProxyRepository, remote_proxy: SwitchProxy) -> None:
    loc = proxy.backends["local"].put_bytes(b"held locally")
    remote_proxy.requests = 0
    assert b"".join(proxy.read_location(loc)) == b"held locally"
    assert remote_proxy.requests == 0  # no 404 round trip on the preferred member


def test_a_failing_preferred_member_does_not_hide_another_members_object(
    proxy: ProxyRepository, remote_proxy: SwitchProxy
) -> None:
    loc = proxy.backends["local"].put_bytes(b"held locally")
    remote_proxy.mode = "close"
    assert proxy.read_bytes(loc.dataKey) == b"held locally"  # preferred member asked first
    # a location naming the failing member, whose object a migration moved to the other one
    moved = Location("remote", loc.dataKey, loc.size)
    assert b"".join(proxy.read_location(moved)) == b"held locally"
    assert proxy.size(loc.dataKey) == len(b"held locally")


def test_an_object_only_the_failing_member_may_hold_is_its_error(
    proxy: ProxyRepository, remote_proxy: SwitchProxy
) -> None:
    remote_proxy.mode = "close"
    with pytest.raises(RepositoryUnavailable, match="'remote'"):
        proxy.read_bytes(new_object_id())


def test_a_malformed_endpoint_names_the_repository(s3_settings: RepositorySettings) -> None:
    bad = s3_settings.model_copy(update={"endpoint_url": "127.0.0.1:9000"})  # no scheme
    with pytest.raises(RepositoryError, match="'cold'"):
        S3Repository.from_settings("cold", bad)
