"""A replica whose creation was acknowledged by the destination keeps its data, even when
the acknowledgement never reached the replication engine (two real gateways; the answer is
lost by a real TCP proxy in between)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossbeat.extensions.replication.destinations import CrossbeatDestination
from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.settings import Endpoint, SiteSettings
from tests.support.faultproxy import losing_proxy
from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client
from tests.support.procs import Service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service, Path]]:
    """Gateways a and b, and b's data dir."""
    root: Path = tmp_path_factory.mktemp("lost")
    with running_gateway(root / "a") as a, running_gateway(root / "b") as b:
        yield a, b, root / "b"


def test_lost_answer_to_the_replica_metadata_write_keeps_the_replica_data(
    sites: tuple[Service, Service, Path],
) -> None:
    a, b, _ = sites
    body = os.urandom(2 * MiB)  # above the single-request size: data, then metadata
    for url in (a.url, b.url):
        s3 = s3_client(url)
        s3.create_bucket(Bucket="lost")
        s3.put_bucket_versioning(Bucket="lost", VersioningConfiguration={"Status": "Enabled"})
    vid = s3_client(a.url).put_object(Bucket="lost", Key="k", Body=body)["VersionId"]
    source = GatewayClient(Endpoint(endpoint=a.url, access_key=ROOT_AK, secret_key=ROOT_SK))  # type: ignore[arg-type]
    md = source.get_metadata("lost", "k", vid)
    assert md is not None

    with losing_proxy(b.url, lose=b"PUT /_/crossbeat/metadata/") as proxy:
        site = SiteSettings(endpoint=proxy.url, access_key=ROOT_AK, secret_key=ROOT_SK)  # type: ignore[arg-type]
        destination = CrossbeatDestination(site, threshold=8 * MiB, part_size=8 * MiB)
        with pytest.raises(ReplicationError) as failed:
            destination.replicate(md, source)
        assert proxy.lost.is_set(), "the metadata write's answer was not the one lost"
        assert failed.value.retryable
        # the engine tries again: the replica is found as created
        assert destination.replicate(md, source) == vid
        destination.client.close()

    got = s3_client(b.url).get_object(Bucket="lost", Key="k", VersionId=vid)
    assert got["ReplicationStatus"] == "REPLICA"
    assert got["Body"].read() == body


def test_a_refused_replica_metadata_write_frees_the_data_it_would_have_used(
    sites: tuple[Service, Service, Path],
) -> None:
    """A 4xx changed nothing, so the bytes sent ahead of it are garbage and go at once."""
    a, b, b_dir = sites
    for url in (a.url, b.url):
        s3 = s3_client(url)
        s3.create_bucket(Bucket="refused")
        s3.put_bucket_versioning(Bucket="refused", VersioningConfiguration={"Status": "Enabled"})
    vid = s3_client(a.url).put_object(Bucket="refused", Key="k", Body=os.urandom(2 * MiB))["VersionId"]
    source = GatewayClient(Endpoint(endpoint=a.url, access_key=ROOT_AK, secret_key=ROOT_SK))  # type: ignore[arg-type]
    md = source.get_metadata("refused", "k", vid)
    assert md is not None
    md["lastModified"] = "yesterday"  # the data is stored, then the version is refused
    before = _chunk_files(b_dir / "sfs")
    site = SiteSettings(endpoint=b.url, access_key=ROOT_AK, secret_key=ROOT_SK)  # type: ignore[arg-type]
    destination = CrossbeatDestination(site, threshold=8 * MiB, part_size=8 * MiB)
    with pytest.raises(ReplicationError) as failed:
        destination.replicate(md, source)
    assert failed.value.status == 400
    assert _chunk_files(b_dir / "sfs") == before
    destination.client.close()


def _chunk_files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and p.parent.parent.name == "chunks"}
