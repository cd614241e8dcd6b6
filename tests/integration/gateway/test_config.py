"""Gateway configuration: generated root credentials, named repositories as locations."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from crossbeat.repositories.object_ids import new_object_id
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


def _raw_exchange(url: str, request: bytes) -> bytes:
    """What the server answers to `request` before it closes the connection."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


@pytest.mark.parametrize("server", ["lean", "uvicorn"])
def test_either_http_server_serves_the_gateway(tmp_path: Path, server: str) -> None:
    """`http_server` picks the HTTP server; both serve the same S3 API (streamed bodies,
    ranges, refused signatures). A malformed request line shows which one answers."""
    config = f'[gateway]\nhttp_server = "{server}"\nworkers = 1\nsmall_object_bytes = 65536\n'
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="served")
        body = os.urandom(3 * 1024 * 1024 + 17)  # streamed: above small_object_bytes
        s3.put_object(Bucket="served", Key="big", Body=body)
        assert s3.get_object(Bucket="served", Key="big")["Body"].read() == body
        ranged = s3.get_object(Bucket="served", Key="big", Range="bytes=1048570-1048600")
        assert ranged["Body"].read() == body[1048570:1048601]
        assert s3.head_object(Bucket="served", Key="big")["ContentLength"] == len(body)
        with pytest.raises(ClientError) as refused:
            s3_client(gw.url, sk="not-the-secret-key").put_object(Bucket="served", Key="x", Body=b"x")
        assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="served")["Contents"]] == ["big"]
        answer = _raw_exchange(gw.url, b"NOT HTTP AT ALL\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")
        # uvicorn explains itself in a text body; ours answers with an empty one
        assert (b"Invalid HTTP request" in answer) == (server == "uvicorn")


def test_default_location_names_the_repository_of_unconstrained_buckets(tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    config = f"""
[gateway]
default_location = "cold"
[gateway.repositories.cold]
type = "sfs"
root = "{cold}"
"""
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="plain")
        # the default location reads as the region's, as in AWS (None for us-east-1)
        assert s3.get_bucket_location(Bucket="plain")["LocationConstraint"] is None
        s3.put_object(Bucket="plain", Key="k", Body=b"to the cold repository")
        assert len(list(cold.glob("*/*/manifest.json"))) == 1
        assert s3.get_object(Bucket="plain", Key="k")["Body"].read() == b"to the cold repository"
        # no repository named "default" exists when another one is the default
        with pytest.raises(ClientError) as refused:
            s3.create_bucket(
                Bucket="nowhere", CreateBucketConfiguration={"LocationConstraint": "default"}
            )
        assert refused.value.response["Error"]["Code"] == "InvalidLocationConstraint"
        assert not (tmp_path / "data" / "sfs").exists()


def test_cleanup_on_start_can_be_turned_off(tmp_path: Path) -> None:
    """The start-up cleanup pass removes an object left without a manifest (a write a crash
    interrupted) unless `cleanup_on_start = false`, which leaves it to a later pass."""
    data = tmp_path / "data"
    key = new_object_id()
    partial = data / "sfs" / key[-3:] / key
    (partial / "chunks" / "0").mkdir(parents=True)
    (partial / "chunks" / "0" / f"{key}-0").write_bytes(b"half-written")
    with running_gateway(data, config="[gateway]\ncleanup_on_start = false\n") as gw:
        s3_client(gw.url).list_buckets()
    assert (partial / "chunks" / "0" / f"{key}-0").exists()
    with running_gateway(data) as gw:
        s3_client(gw.url).list_buckets()
    assert not partial.exists()


def test_a_relative_data_dir_holds_the_objects_where_it_says(tmp_path: Path) -> None:
    """--data-dir data, from the directory above: the objects are in data/sfs, and the same
    directory named by its absolute path from elsewhere serves them. They were put in
    data/data/sfs, and the second start refused ('the metadata names 1 objects in
    repository 'default', which holds none')."""
    with running_gateway(Path("data"), cwd=tmp_path) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="rel")
        s3.put_object(Bucket="rel", Key="k", Body=b"where it says")
    assert len(list((tmp_path / "data" / "sfs").glob("*/*/manifest.json"))) == 1
    assert not (tmp_path / "data" / "data").exists()
    with running_gateway(tmp_path / "data") as gw:
        assert s3_client(gw.url).get_object(Bucket="rel", Key="k")["Body"].read() == b"where it says"


def test_replication_sites_setting_refuses_a_rule_naming_another_site(tmp_path: Path) -> None:
    """[gateway] replication_sites: PutBucketReplication refuses a rule whose StorageClass
    names a site not listed (what `crossbeat up` configures for site a), at once, rather
    than leaving its versions to fail in the pipeline."""
    with running_gateway(tmp_path / "data", config='[gateway]\nreplication_sites = ["b"]\n') as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="src")
        s3.put_bucket_versioning(Bucket="src", VersioningConfiguration={"Status": "Enabled"})

        def rule(site: str) -> dict[str, object]:
            return {"Role": "arn:aws:iam::000000000000:role/crossbeat",
                    "Rules": [{"ID": "r", "Status": "Enabled", "Priority": 1, "Filter": {"Prefix": ""},
                                           "DeleteMarkerReplication": {"Status": "Disabled"},
                                           "Destination": {"Bucket": "arn:aws:s3:::dst", "StorageClass": site}}]}

        with pytest.raises(ClientError) as exc:
            s3.put_bucket_replication(Bucket="src", ReplicationConfiguration=rule("STANDARD"))
        assert exc.value.response["Error"]["Code"] == "InvalidRequest"
        assert "STANDARD" in exc.value.response["Error"]["Message"]
        with pytest.raises(ClientError):
            s3.get_bucket_replication(Bucket="src")  # nothing stored
        s3.put_bucket_replication(Bucket="src", ReplicationConfiguration=rule("b"))
        assert s3.get_bucket_replication(Bucket="src")["ReplicationConfiguration"]["Rules"][0]["ID"] == "r"
