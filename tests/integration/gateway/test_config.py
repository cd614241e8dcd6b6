"""Gateway configuration: generated root credentials, named repositories as locations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import start_service

pytestmark = pytest.mark.integration


def test_generated_root_credentials_are_kept_and_printed_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    svc = start_service(["gateway", "--data-dir", str(data), "--listen", "127.0.0.1:0"],
                        env={"CROSSBEAT_ACCESS_KEY": "", "CROSSBEAT_SECRET_KEY": ""})
    try:
        m = re.search(r"access key (\S+) secret key (\S+)", "".join(svc.output))
        assert m, svc.output
        s3 = s3_client(svc.url, m.group(1), m.group(2))
        s3.create_bucket(Bucket="generated")
    finally:
        svc.stop()
    again = start_service(["gateway", "--data-dir", str(data), "--listen", "127.0.0.1:0"],
                          env={"CROSSBEAT_ACCESS_KEY": "", "CROSSBEAT_SECRET_KEY": ""})
    try:
        assert "access key" not in "".join(again.output)
        s3 = s3_client(again.url, m.group(1), m.group(2))
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["generated"]
    finally:
        again.stop()


def test_location_constraint_picks_a_named_repository(tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    config = f"""
[gateway.repositories.cold]
type = "sfs"
root = "{cold}"
chunk_size = 65536
"""
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="coldbucket", CreateBucketConfiguration={"LocationConstraint": "cold"})
        assert s3.get_bucket_location(Bucket="coldbucket")["LocationConstraint"] == "cold"
        body = bytes(range(256)) * 1024  # 256 KiB: four 64 KiB chunks
        s3.put_object(Bucket="coldbucket", Key="k", Body=body)
        manifests = list(cold.glob("*/*/manifest.json"))
        assert len(manifests) == 1
        assert len(list(manifests[0].parent.glob("chunks/0/*"))) == 4
        assert s3.get_object(Bucket="coldbucket", Key="k")["Body"].read() == body
        s3.create_bucket(Bucket="hotbucket")
        s3.put_object(Bucket="hotbucket", Key="k", Body=b"hot")
        assert len(list(cold.glob("*/*/manifest.json"))) == 1
