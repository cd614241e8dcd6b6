"""Small PUTs' group commit: staged objects share syncs and metadata transactions, and a
refused object leaves neither metadata nor data behind."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.metadata import Bucket
from crossbeat.repositories import syncgroup
from crossbeat.repositories.sfs import SfsRepository
from crossbeat.s3.body import Checksums
from crossbeat.s3.datapath import Written
from crossbeat.s3.errors import S3Error
from crossbeat.s3.gateway import Gateway
from crossbeat.s3.settings import GatewaySettings

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    gateway = Gateway.open(GatewaySettings(data_dir=tmp_path / "data", workers=1), {})
    gateway.store.create_bucket(Bucket("b", "owner", "default", "2026-01-01T00:00:00.000Z"))
    try:
        yield gateway
    finally:
        gateway.close()


def build_for(key: str) -> Any:
    def build(written: Written, bucket: Bucket | None) -> dict[str, Any]:
        if bucket is None:
            raise S3Error("NoSuchBucket")
        return {
            "bucket": bucket.name, "key": key, "versionId": "null", "isLatest": True,
            "isDeleteMarker": False, "size": written.size, "etag": written.md5_hex,
            "location": [written.location.to_json()],
        }  # fmt: skip

    return build


def checksums() -> Checksums:
    return Checksums(md5_hex="0" * 32, algorithm=None, value_b64=None)


async def put_many(gw: Gateway, bucket: str, n: int) -> list[Any]:
    repo = gw.repository("default")
    staged = [repo.stage_bytes(os.urandom(100 + i)) for i in range(n)]
    assert all(s is not None for s in staged)
    return await asyncio.gather(
        *(gw.put_batcher.put(s, checksums(), bucket, build_for(f"k{i}")) for i, s in enumerate(staged) if s),
        return_exceptions=True,
    )


def test_a_burst_of_puts_shares_syncs_and_transactions(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "b", 50))
    repo = gw.repository("default")
    assert isinstance(repo, SfsRepository) and repo._sync_group is not None
    for i, (written, meta) in enumerate(results):
        stored = gw.store.get_version("b", f"k{i}", None)
        assert stored is not None and stored["location"] == meta["location"]
        assert len(repo.read_bytes(written.location.dataKey)) == 100 + i
    # staged before the first round began, all fifty ride on very few syncs and commits
    assert repo._sync_group.rounds < 10
    assert gw.put_batcher.batches < 10


def test_a_refused_version_leaves_no_data(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "missing", 3))
    assert all(isinstance(r, S3Error) and r.code == "NoSuchBucket" for r in results)
    assert list(gw.repository("default").keys()) == []


def test_a_closed_batcher_refuses_and_writes_nothing(gw: Gateway) -> None:
    gw.put_batcher.close()
    results = asyncio.run(put_many(gw, "b", 1))
    assert isinstance(results[0], S3Error) and results[0].status == 503
    assert list(gw.repository("default").keys()) == []
