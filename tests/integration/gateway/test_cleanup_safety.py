"""A gateway started on lost metadata deletes nothing: with its database deleted (SQLite then
makes an empty one), its start-up cleanup pass removed every object as an orphan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.gateway import running_gateway, s3_client

pytestmark = pytest.mark.integration


def manifests(data_dir: Path) -> set[str]:
    return {p.parent.name for p in (data_dir / "sfs").glob("*/*/manifest.json")}


def test_a_start_on_lost_metadata_removes_no_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="kept")
        for i in range(5):
            s3.put_object(Bucket="kept", Key=f"k{i}", Body=os.urandom(1000 + i))
    before = manifests(data_dir)
    assert len(before) == 5
    for name in ("metadata.sqlite", "metadata.sqlite-wal", "metadata.sqlite-shm"):
        (data_dir / name).unlink(missing_ok=True)
    with running_gateway(data_dir) as svc:
        assert manifests(data_dir) == before
        assert any("the metadata store names no data" in line for line in svc.output)
