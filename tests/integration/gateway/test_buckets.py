from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import botocore.exceptions
import httpx
import pytest

from crossbeat.metadata import open_store
from tests.support.gateway import ROOT_AK, USER_AK, USER_SK, running_gateway, s3_client, signed
from tests.support.procs import Service, wait_until

pytestmark = pytest.mark.integration


def code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def test_create_list_head_delete(s3: Any) -> None:
    s3.create_bucket(Bucket="life-cycle")
    assert "life-cycle" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket="life-cycle")
    s3.put_object(Bucket="life-cycle", Key="k", Body=b"x")
    # us-east-1, as AWS there ("for legacy compatibility"): one's own bucket again is 200 OK,
    # and changes nothing
    assert s3.create_bucket(Bucket="life-cycle")["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="life-cycle")["Contents"]] == ["k"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.delete_bucket(Bucket="life-cycle")
    assert code(exc) == "BucketNotEmpty"
    s3.delete_object(Bucket="life-cycle", Key="k")
    s3.delete_bucket(Bucket="life-cycle")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.head_bucket(Bucket="life-cycle")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


@pytest.mark.parametrize("name", [
    "ab", "UPPER", "has_underscore", "192.168.1.1", "a..b", "-lead",
    # the prefixes and suffixes AWS's general purpose bucket naming rules reserve
    "xn--punycode", "sthree-bucket", "sthree-configurator", "amzn-s3-demo-bucket",
    "my-bucket-s3alias", "my-bucket--ol-s3", "my-bucket.mrap", "my-bucket--table-s3",
])
def test_invalid_bucket_names(s3: Any, name: str) -> None:
    with pytest.raises((botocore.exceptions.ClientError, botocore.exceptions.ParamValidationError)) as exc:
        s3.create_bucket(Bucket=name)
    if isinstance(exc.value, botocore.exceptions.ClientError):
        assert exc.value.response["Error"]["Code"] == "InvalidBucketName"


def test_directory_bucket_suffix_is_an_invalid_name(gateway: Service, s3: Any) -> None:
    # signed here: boto3 sends a name ending in --x-s3 to S3 Express (its own auth scheme)
    name = "my-bucket--use1-az4--x-s3"
    r = signed("PUT", f"{gateway.url}/{name}")
    assert r.status_code == 400 and b"<Code>InvalidBucketName</Code>" in r.content
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_names_near_the_reserved_ones_are_valid(s3: Any) -> None:
    """Only the reserved affixes themselves are refused, where AWS places them."""
    names = ["sthree", "my-sthree-bucket", "amzn-s3-demo", "xn-a", "s3alias-first", "b-s3aliass",
             "b-ol-s3", "b.mrap1", "mrap", "b-x-s3", "b-table-s3", "table-s3.example"]
    for name in names:
        s3.create_bucket(Bucket=name)
    listed = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert set(names) <= listed


def test_location(s3: Any) -> None:
    s3.create_bucket(Bucket="loc-default")
    assert s3.get_bucket_location(Bucket="loc-default")["LocationConstraint"] is None
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.create_bucket(Bucket="loc-bad", CreateBucketConfiguration={"LocationConstraint": "nowhere"})
    assert code(exc) == "InvalidLocationConstraint"


def test_other_users_bucket_is_access_denied(s3: Any, alice: Any) -> None:
    s3.create_bucket(Bucket="root-owned")
    s3.put_object(Bucket="root-owned", Key="secret", Body=b"s")
    alice.create_bucket(Bucket="alice-owned")
    assert [b["Name"] for b in alice.list_buckets()["Buckets"]] == ["alice-owned"]
    for call in (
        lambda: alice.get_object(Bucket="root-owned", Key="secret"),
        lambda: alice.put_object(Bucket="root-owned", Key="x", Body=b"x"),
        lambda: alice.list_objects_v2(Bucket="root-owned"),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            call()
        assert code(exc) == "AccessDenied"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        alice.create_bucket(Bucket="root-owned")
    assert code(exc) == "BucketAlreadyExists"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="root-owned")["Contents"]] == ["secret"]


def test_anonymous_and_missigned_requests_change_nothing(gateway: Service, s3: Any) -> None:
    s3.create_bucket(Bucket="guarded")
    r = httpx.put(f"{gateway.url}/guarded/anon", content=b"x")
    assert r.status_code == 403 and b"<Code>AccessDenied</Code>" in r.content
    # an empty Authorization is no credentials, as AWS takes it (not an unknown scheme's 400)
    r = httpx.put(f"{gateway.url}/guarded/anon", content=b"x", headers={"authorization": ""})
    assert r.status_code == 403 and b"<Code>AccessDenied</Code>" in r.content
    bad = s3_client(gateway.url, ROOT_AK, "wrong-secret")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        bad.put_object(Bucket="guarded", Key="forged", Body=b"x")
    assert code(exc) == "SignatureDoesNotMatch"
    unknown = s3_client(gateway.url, "NOSUCHKEY", "x")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        unknown.put_object(Bucket="guarded", Key="forged", Body=b"x")
    assert code(exc) == "InvalidAccessKeyId"
    assert s3.list_objects_v2(Bucket="guarded")["KeyCount"] == 0


def test_error_body_is_s3_xml(gateway: Service, s3: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket="no-such-bucket-here", Key="k")
    assert code(exc) == "NoSuchBucket"
    assert exc.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]


def test_replication_configuration(s3: Any) -> None:
    s3.create_bucket(Bucket="repl-src")
    config = {
        "Role": "arn:aws:iam::000000000000:role/replication",
        "Rules": [{
            "ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": "docs/"},
            "DeleteMarkerReplication": {"Status": "Enabled"},
            "Destination": {"Bucket": "arn:aws:s3:::repl-dst", "StorageClass": "b"},
        }],
    }
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_bucket_replication(Bucket="repl-src", ReplicationConfiguration=config)
    assert code(exc) == "InvalidRequest"  # versioning must be Enabled
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_bucket_replication(Bucket="repl-src")
    assert code(exc) == "ReplicationConfigurationNotFoundError"
    s3.put_bucket_versioning(Bucket="repl-src", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_replication(Bucket="repl-src", ReplicationConfiguration=config)
    got = s3.get_bucket_replication(Bucket="repl-src")["ReplicationConfiguration"]
    assert got["Rules"][0]["ID"] == "to-b"
    assert got["Rules"][0]["Destination"]["StorageClass"] == "b"
    s3.put_object(Bucket="repl-src", Key="docs/a", Body=b"a")
    s3.put_object(Bucket="repl-src", Key="other/a", Body=b"a")
    assert s3.head_object(Bucket="repl-src", Key="docs/a")["ReplicationStatus"] == "PENDING"
    assert s3.get_object(Bucket="repl-src", Key="docs/a")["ReplicationStatus"] == "PENDING"
    assert "ReplicationStatus" not in s3.head_object(Bucket="repl-src", Key="other/a")
    s3.delete_bucket_replication(Bucket="repl-src")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_bucket_replication(Bucket="repl-src")
    assert code(exc) == "ReplicationConfigurationNotFoundError"


def test_notification_configuration(s3: Any) -> None:
    s3.create_bucket(Bucket="notify-me")
    cfg = {"QueueConfigurations": [{
        "Id": "q1", "QueueArn": "arn:aws:sqs:us-east-1:000000000000:q",
        "Events": ["s3:ObjectCreated:*"],
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}},
    }]}
    s3.put_bucket_notification_configuration(Bucket="notify-me", NotificationConfiguration=cfg)
    got = s3.get_bucket_notification_configuration(Bucket="notify-me")
    assert got["QueueConfigurations"][0]["Id"] == "q1"
    assert got["QueueConfigurations"][0]["Events"] == ["s3:ObjectCreated:*"]
    bad = {"QueueConfigurations": [{"QueueArn": "arn:aws:sqs:us-east-1:0:q", "Events": ["s3:NoSuchEvent"]}]}
    with pytest.raises(botocore.exceptions.ClientError):
        s3.put_bucket_notification_configuration(Bucket="notify-me", NotificationConfiguration=bad)
    assert s3.get_bucket_notification_configuration(Bucket="notify-me")["QueueConfigurations"][0]["Id"] == "q1"


def test_list_buckets_pages_and_filters(s3: Any, alice: Any, gateway: Service) -> None:
    names = [f"lb-page-{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    alice.create_bucket(Bucket="lb-page-alices")
    seen, token = [], None
    while True:
        kwargs = {"Prefix": "lb-page-", "MaxBuckets": 2} | ({"ContinuationToken": token} if token else {})
        page = s3.list_buckets(**kwargs)
        assert page["Prefix"] == "lb-page-" and len(page["Buckets"]) <= 2
        seen += [b["Name"] for b in page["Buckets"]]
        token = page.get("ContinuationToken")
        if token is None:
            break
    assert seen == names  # in name order, each once, none of another owner's
    assert {b["BucketRegion"] for b in s3.list_buckets(Prefix="lb-page-")["Buckets"]} == {"us-east-1"}
    assert not s3.list_buckets(Prefix="lb-page-", BucketRegion="eu-west-1")["Buckets"]
    assert "ContinuationToken" not in s3.list_buckets(Prefix="lb-page-", MaxBuckets=5)
    everything = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert set(names) <= set(everything) and "lb-page-alices" not in everything
    unchecked = s3_client(gateway.url, parameter_validation=False)  # let the server judge
    for bad in ({"MaxBuckets": 0}, {"MaxBuckets": 10001}, {"ContinuationToken": "%%%"}):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            unchecked.list_buckets(**bad)
        assert exc.value.response["Error"]["Code"] == "InvalidArgument", bad


def test_a_refused_upload_is_not_asked_for_its_body(gateway: Service, s3: Any) -> None:
    """With Expect: 100-continue, a request refused before its body is read gets its answer
    without a 100 Continue first (the client then never sends the body), and the
    connection closes instead of waiting for a body nobody asked for."""
    import socket
    from urllib.parse import urlsplit

    s3.create_bucket(Bucket="expect-refused")
    url = urlsplit(gateway.url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"PUT /expect-refused/k HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n"
                     b"Expect: 100-continue\r\n\r\n" % url.netloc.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 403 ") and b"100 Continue" not in answer
    assert answer.lower().count(b"connection: close") == 1
    assert "Contents" not in s3.list_objects_v2(Bucket="expect-refused")


def test_a_bucket_deleted_by_another_worker_is_no_such_bucket(tmp_path: Path) -> None:
    # One worker process, which has the bucket in its cache; the bucket is then deleted in
    # the store by someone else (another worker process of the same gateway does this).
    data = tmp_path / "data"
    with running_gateway(data, config="[gateway]\nworkers = 1\n") as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="gone")
        s3.head_bucket(Bucket="gone")
        store = open_store(data / "metadata.sqlite")
        try:
            store.delete_bucket("gone")
        finally:
            store.close()
        for call in (lambda: s3.create_multipart_upload(Bucket="gone", Key="k"),
                     lambda: s3.put_object(Bucket="gone", Key="k", Body=b"x")):  # fmt: skip
            with pytest.raises(botocore.exceptions.ClientError) as exc:
                call()
            assert code(exc) == "NoSuchBucket"  # it was a 500
        assert "gone" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        # the refused PUT's data is gone too (freed by a worker thread, after the answer)
        wait_until(lambda: not list(data.rglob("manifest.json")), timeout=30, what="the refused PUT's data freed")


def test_a_name_created_again_by_another_user_is_theirs_in_every_worker(tmp_path: Path) -> None:
    """A bucket deleted and created again by another user, through another worker process
    (played by a second store): this worker, which had the old bucket cached, gives the
    former owner AccessDenied and serves the new one. It answered from the cached bucket:
    the former owner read the new owner's objects and the new owner was refused."""
    data = tmp_path / "data"
    with running_gateway(data) as gw:
        alice, root = s3_client(gw.url, USER_AK, USER_SK), s3_client(gw.url)
        alice.create_bucket(Bucket="reused")
        alice.put_object(Bucket="reused", Key="mine", Body=b"alice's")
        alice.delete_object(Bucket="reused", Key="mine")  # every worker has it cached now
        store = open_store(data / "metadata.sqlite")
        try:
            old = store.get_bucket("reused")
            assert old is not None and old.owner == USER_AK
            store.delete_bucket("reused")
            store.create_bucket(dataclasses.replace(old, owner=ROOT_AK))
        finally:
            store.close()
        root.put_object(Bucket="reused", Key="secret", Body=b"root's")
        assert root.get_object(Bucket="reused", Key="secret")["Body"].read() == b"root's"
        for call in (lambda: alice.get_object(Bucket="reused", Key="secret"),
                     lambda: alice.put_object_tagging(Bucket="reused", Key="secret",
                                                      Tagging={"TagSet": [{"Key": "a", "Value": "b"}]}),
                     lambda: alice.create_multipart_upload(Bucket="reused", Key="k")):  # fmt: skip
            with pytest.raises(botocore.exceptions.ClientError) as exc:
                call()
            assert code(exc) == "AccessDenied"
        assert root.get_object_tagging(Bucket="reused", Key="secret")["TagSet"] == []


def test_delete_bucket_takes_its_open_uploads_with_it(tmp_path: Path) -> None:
    """As on S3: uploads begun and never completed do not keep a bucket alive; their parts'
    data is freed with them."""
    data = tmp_path / "data"
    with running_gateway(data) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="unfinished")
        upload = s3.create_multipart_upload(Bucket="unfinished", Key="k")["UploadId"]
        s3.upload_part(Bucket="unfinished", Key="k", UploadId=upload, PartNumber=1, Body=b"p" * 6 * 1024 * 1024)
        s3.create_multipart_upload(Bucket="unfinished", Key="other")
        manifests = lambda: list((data / "sfs").glob("*/*/manifest.json"))  # noqa: E731
        assert len(manifests()) == 1
        assert s3.delete_bucket(Bucket="unfinished")["ResponseMetadata"]["HTTPStatusCode"] == 204
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.head_bucket(Bucket="unfinished")
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        wait_until(lambda: manifests() == [], timeout=30, what="the part's data freed")
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.upload_part(Bucket="unfinished", Key="k", UploadId=upload, PartNumber=2, Body=b"late")
        assert code(exc) == "NoSuchBucket"
        s3.create_bucket(Bucket="unfinished")  # a new bucket of that name starts empty
        assert s3.list_multipart_uploads(Bucket="unfinished").get("Uploads", []) == []


def test_own_bucket_again_outside_us_east_1_is_already_owned(tmp_path: Path) -> None:
    with running_gateway(tmp_path / "data", config='[gateway]\nregion = "eu-west-1"\n') as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="mine")
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.create_bucket(Bucket="mine")
        assert code(exc) == "BucketAlreadyOwnedByYou"
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
