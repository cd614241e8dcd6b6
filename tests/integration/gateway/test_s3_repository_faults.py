"""An s3 repository whose backend misbehaves: damaged objects, hangs, a shared bucket.

A front gateway keeps the data of its buckets created with LocationConstraint "cold" in an
s3 repository whose backend is a second crossbeat gateway, reached through a `SwitchProxy`
(tests/support/faultproxy.py) that can make it hang or drop connections. Objects in the
backend are damaged by writing to the backend directly.

- an object replaced in the backend (same size) is refused (the write's ETag, If-Match),
  and so is one shorter than its location records: 500 before any byte, naming it; a piece
  found short once the body is streaming cuts the connection (never a hang); a copy from a
  short source fails and creates nothing;
- a hung backend costs its buckets' requests a bounded time and a 503, and other buckets
  are served meanwhile (the repository's I/O has its own threads, the replication engine's
  batch routes' included); a gateway starts while
  its backend hangs and serves the bucket once the backend answers;
- a second gateway configured on the same backend bucket and prefix refuses the repository
  (ownership marker) instead of deleting the first one's objects as leftovers.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.support.faultproxy import SwitchProxy, switch_proxy
from tests.support.gateway import (
    ROOT_AK,
    ROOT_SK,
    USER_AK,
    USER_SK,
    running_gateway,
    s3_client,
    signed,
)
from tests.support.procs import Service, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
MiB = 1024 * 1024
BACKEND_BUCKET = "repo-data"
PREFIX = "d/"


def front_config(endpoint: str, *, prefix: str = PREFIX) -> str:
    # few shared workers, so that starving them shows; short timeouts, so that a hang ends
    return f"""
[gateway]
worker_threads = 4

[[gateway.users]]
access_key = "{USER_AK}"
secret_key = "{USER_SK}"
display_name = "alice"

[gateway.repositories.cold]
type = "s3"
endpoint_url = "{endpoint}"
bucket = "{BACKEND_BUCKET}"
prefix = "{prefix}"
access_key = "{ROOT_AK}"
secret_key = "{ROOT_SK}"
connect_timeout_s = 2
read_timeout_s = 2
max_attempts = 2
io_threads = 2
io_queue = 4
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("back")) / "data") as svc:
        s3_client(svc.url).create_bucket(Bucket=BACKEND_BUCKET)
        yield svc


@pytest.fixture(scope="module")
def back(backend: Service) -> Any:
    return s3_client(backend.url)


@pytest.fixture(scope="module")
def proxy(backend: Service) -> Iterator[SwitchProxy]:
    with switch_proxy(backend.url) as p:
        yield p


@pytest.fixture
def passing(proxy: SwitchProxy) -> Iterator[SwitchProxy]:
    """The proxy, relaying again at the end of the test whatever it did."""
    proxy.mode = "pass"
    try:
        yield proxy
    finally:
        proxy.mode = "pass"


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, proxy: SwitchProxy) -> Iterator[Service]:
    with running_gateway(
        Path(tmp_path_factory.mktemp("front")) / "data", config=front_config(proxy.url)
    ) as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(front: Service) -> Any:
    return s3_client(front.url, connect_timeout=5, read_timeout=60)


@pytest.fixture
def cold(s3: Any, request: pytest.FixtureRequest) -> str:
    name = "c-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "cold"})
    return name


def backend_keys(back: Any) -> set[str]:
    pages = back.get_paginator("list_objects_v2").paginate(Bucket=BACKEND_BUCKET, Prefix=PREFIX)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def put_cold(s3: Any, back: Any, bucket: str, key: str, body: bytes) -> str:
    """PUT through the front; the backend key that holds the data."""
    before = backend_keys(back)
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    (new,) = backend_keys(back) - before
    return new


def _outcome(call: Any) -> tuple[int, str]:
    """(200, "") if `call()` succeeds, else the S3 error's (status, code)."""
    try:
        call()
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]
    return 200, ""


def error_of(call: Any) -> tuple[int, str, str]:
    with pytest.raises(ClientError) as info:
        call()
    err = info.value.response
    return err["ResponseMetadata"]["HTTPStatusCode"], err["Error"]["Code"], err["Error"].get("Message", "")


def test_object_replaced_in_the_backend_is_refused(s3: Any, back: Any, cold: str, passing: SwitchProxy) -> None:
    stored = put_cold(s3, back, cold, "k", b"a" * 1000)
    back.put_object(Bucket=BACKEND_BUCKET, Key=stored, Body=b"b" * 1000)  # same size
    status, code, message = error_of(lambda: s3.get_object(Bucket=cold, Key="k")["Body"].read())
    assert (status, code) == (500, "InternalError")
    assert stored[len(PREFIX):] in message and "replaced" in message


def test_object_shorter_in_the_backend_is_refused_before_the_body(
    s3: Any, back: Any, cold: str, passing: SwitchProxy
) -> None:
    stored = put_cold(s3, back, cold, "k", b"a" * 1000)
    back.put_object(Bucket=BACKEND_BUCKET, Key=stored, Body=b"a" * 600)
    for extra in ({}, {"Range": "bytes=100-899"}):
        status, code, message = error_of(lambda e=extra: s3.get_object(Bucket=cold, Key="k", **e)["Body"].read())
        assert (status, code) == (500, "InternalError")
        assert stored[len(PREFIX):] in message


def test_piece_short_in_the_backend_mid_stream_cuts_the_connection(
    s3: Any, back: Any, cold: str, passing: SwitchProxy
) -> None:
    before = backend_keys(back)
    upload = s3.create_multipart_upload(Bucket=cold, Key="big")["UploadId"]
    parts = []
    for number, body in ((1, b"1" * (5 * MiB)), (2, b"2" * (2 * MiB))):
        etag = s3.upload_part(Bucket=cold, Key="big", UploadId=upload, PartNumber=number, Body=body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(Bucket=cold, Key="big", UploadId=upload, MultipartUpload={"Parts": parts})
    listed = back.list_objects_v2(Bucket=BACKEND_BUCKET, Prefix=PREFIX)["Contents"]
    (second,) = [o["Key"] for o in listed if o["Key"] not in before and o["Size"] == 2 * MiB]
    back.put_object(Bucket=BACKEND_BUCKET, Key=second, Body=b"2" * MiB)
    began = time.monotonic()
    response = s3.get_object(Bucket=cold, Key="big")  # the first part is fine: the body starts
    with pytest.raises(BotoCoreError):
        response["Body"].read()
    assert time.monotonic() - began < 30  # cut, not left waiting for the client's timeout


def test_copy_from_a_short_source_creates_nothing(s3: Any, back: Any, cold: str, passing: SwitchProxy) -> None:
    stored = put_cold(s3, back, cold, "src", b"a" * 1000)
    back.put_object(Bucket=BACKEND_BUCKET, Key=stored, Body=b"a" * 10)
    status, _, _ = error_of(lambda: s3.copy_object(Bucket=cold, Key="dst", CopySource={"Bucket": cold, "Key": "src"}))
    assert status == 500
    assert error_of(lambda: s3.head_object(Bucket=cold, Key="dst"))[0] == 404


def test_hung_backend_answers_503_and_other_buckets_are_served(
    s3: Any, back: Any, cold: str, passing: SwitchProxy, front: Service
) -> None:
    put_cold(s3, back, cold, "k", b"a" * 1000)
    s3.create_bucket(Bucket="local-while-hung")
    s3.put_object(Bucket="local-while-hung", Key="k", Body=b"l" * 1000)
    passing.mode = "hang"
    passing.requests = 0
    # more GETs of the hung bucket than the gateway has shared workers
    outcomes: list[tuple[int, str]] = []

    def hung_get() -> None:
        client = s3_client(front.url, connect_timeout=5, read_timeout=120)
        outcomes.append(_outcome(lambda: client.get_object(Bucket=cold, Key="k")["Body"].read()))

    threads = [threading.Thread(target=hung_get, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: passing.requests > 0, timeout=30, what="a request reaching the hung backend")
    # the shared workers still serve the local bucket, quickly
    began = time.monotonic()
    for _ in range(5):
        assert s3.get_object(Bucket="local-while-hung", Key="k")["Body"].read() == b"l" * 1000
        s3.put_object(Bucket="local-while-hung", Key="k2", Body=b"x" * 2 * MiB)
    assert time.monotonic() - began < 10
    for t in threads:
        t.join(timeout=120)
    # each answered within its bounded timeouts: 503, retryable (or queued out at once)
    assert len(outcomes) == 8
    assert set(outcomes) == {(503, "ServiceUnavailable")}
    passing.mode = "pass"
    assert s3.get_object(Bucket=cold, Key="k")["Body"].read() == b"a" * 1000


def _slowest_local_round_while(
    hung: Any, args: Iterable[int], proxy: SwitchProxy, s3: Any, local: str
) -> float:
    """Run `hung(arg)` for each arg on threads (requests that reach the hung backend), and
    meanwhile time five rounds of a GET and a 2 MiB PUT in bucket `local` (which holds `k`,
    1000 b"l"); the slowest round's seconds, once every thread has ended."""
    threads = [threading.Thread(target=hung, args=(a,), daemon=True) for a in args]
    for t in threads:
        t.start()
    wait_until(lambda: proxy.requests > 0, timeout=30, what="a request reaching the hung backend")
    slowest = 0.0
    for _ in range(5):
        began = time.monotonic()
        assert s3.get_object(Bucket=local, Key="k")["Body"].read() == b"l" * 1000
        s3.put_object(Bucket=local, Key="k2", Body=b"x" * 2 * MiB)
        slowest = max(slowest, time.monotonic() - began)
    for t in threads:
        t.join(timeout=120)
    return slowest


def test_part_copies_from_a_hung_backend_leave_the_shared_workers_free(
    s3: Any, back: Any, cold: str, passing: SwitchProxy, front: Service
) -> None:
    """UploadPartCopy reads a remote source on its repository's threads, as CopyObject."""
    put_cold(s3, back, cold, "src", b"s" * 1000)
    s3.create_bucket(Bucket="local-part-copies")
    s3.put_object(Bucket="local-part-copies", Key="k", Body=b"l" * 1000)
    upload = s3.create_multipart_upload(Bucket="local-part-copies", Key="m")["UploadId"]
    passing.mode = "hang"
    passing.requests = 0
    outcomes: list[tuple[int, str]] = []

    def hung_copy(number: int) -> None:
        client = s3_client(front.url, connect_timeout=5, read_timeout=120)
        outcomes.append(_outcome(lambda: client.upload_part_copy(
            Bucket="local-part-copies", Key="m", UploadId=upload, PartNumber=number,
            CopySource={"Bucket": cold, "Key": "src"})))

    # not waiting for a worker a hung backend holds
    assert _slowest_local_round_while(hung_copy, range(1, 9), passing, s3, "local-part-copies") < 2.5
    assert set(outcomes) == {(503, "ServiceUnavailable")} and len(outcomes) == 8
    assert s3.list_parts(Bucket="local-part-copies", Key="m", UploadId=upload).get("Parts", []) == []


def _batch(url: str, route: str, doc: Any) -> Any:
    return signed("POST", f"{url}/_/crossbeat/{route}", orjson.dumps(doc), {"content-type": "application/json"})


def test_batch_routes_on_a_hung_backend_leave_the_shared_workers_free(
    s3: Any, back: Any, cold: str, passing: SwitchProxy, front: Service
) -> None:
    """The replication engine's batch routes read and write a remote repository on its own
    threads too: more batches for a hung backend than the gateway has shared workers leave
    other buckets served, and each batch answers, item by item, in bounded time."""
    s3.put_bucket_versioning(Bucket=cold, VersioningConfiguration={"Status": "Enabled"})
    vid = s3.put_object(Bucket=cold, Key="k", Body=b"a" * 1000)["VersionId"]
    s3.create_bucket(Bucket="local-batches")
    s3.put_object(Bucket="local-batches", Key="k", Body=b"l" * 1000)
    passing.mode = "hang"
    passing.requests = 0
    answers: list[dict[str, Any]] = []

    def hung_batch(i: int) -> None:
        if i % 2:
            doc = {"versions": [{"bucket": cold, "key": "k", "versionId": vid}]}
            answers.append(_batch(front.url, "batchRead?inlineBelow=4096", doc).json()["versions"][0])
        else:
            data = b"r%d" % i
            md = {"bucket": cold, "key": f"r{i}", "versionId": f"0000000000000000000{i}rp", "sortKey":
                  f"0000000000000000000{i}rp", "size": len(data), "etag": hashlib.md5(data).hexdigest(),
                  "isDeleteMarker": False, "lastModified": "2026-11-22T00:00:00.000Z",
                  "replicationInfo": {"status": "REPLICA"}}
            doc = {"replicas": [{"metadata": md, "data": base64.b64encode(data).decode()}]}
            answers.append(_batch(front.url, "batchReplica", doc).json()["results"][0])

    # not waiting for a worker a hung backend holds (4 s and more; 0.1 s here)
    assert _slowest_local_round_while(hung_batch, range(8), passing, s3, "local-batches") < 2.5
    assert len(answers) == 8
    reads = [a for a in answers if "metadata" in a]
    writes = [a for a in answers if "metadata" not in a]
    # a read that could not inline says why (the caller then GETs, which answers 503)
    assert len(reads) == 4 and all(a["metadata"]["versionId"] == vid and "dataError" in a for a in reads)
    # a replica the backend could not take is retryable, as a PUT's 503, and made nothing
    assert [a.get("error") for a in writes] == ["ServiceUnavailable"] * 4
    passing.mode = "pass"
    listed = s3.list_object_versions(Bucket=cold).get("Versions", [])
    assert [v["Key"] for v in listed] == ["k"]


def test_backend_down_is_503(s3: Any, back: Any, cold: str, passing: SwitchProxy) -> None:
    put_cold(s3, back, cold, "k", b"a" * 1000)
    passing.mode = "close"
    assert error_of(lambda: s3.get_object(Bucket=cold, Key="k"))[:2] == (503, "ServiceUnavailable")
    assert error_of(lambda: s3.put_object(Bucket=cold, Key="k2", Body=b"x"))[:2] == (503, "ServiceUnavailable")


def test_gateway_starts_while_its_backend_hangs(
    tmp_path: Path, backend: Service, s3: Any
) -> None:
    with switch_proxy(backend.url) as hung:
        hung.mode = "hang"
        began = time.monotonic()
        with running_gateway(tmp_path / "data", config=front_config(hung.url, prefix="started/")) as svc:
            assert time.monotonic() - began < 30
            client = s3_client(svc.url, connect_timeout=5, read_timeout=60)
            client.create_bucket(Bucket="late", CreateBucketConfiguration={"LocationConstraint": "cold"})
            assert error_of(lambda: client.put_object(Bucket="late", Key="k", Body=b"x"))[0] == 503
            hung.mode = "pass"

            def stored() -> bool:
                try:
                    client.put_object(Bucket="late", Key="k", Body=b"x")
                except ClientError:
                    return False
                return True

            wait_until(stored, timeout=60, what="the bucket served once its backend answers")
            assert client.get_object(Bucket="late", Key="k")["Body"].read() == b"x"


def test_second_gateway_on_the_same_bucket_and_prefix_refuses_it(
    tmp_path: Path, s3: Any, back: Any, cold: str, passing: SwitchProxy
) -> None:
    put_cold(s3, back, cold, "kept", b"a" * 1000)
    with running_gateway(tmp_path / "data", config=front_config(passing.url)) as other:
        wait_until(lambda: "belongs to another gateway" in "".join(other.output), timeout=60,
                   what="the second gateway refusing the repository")
        client = s3_client(other.url)
        client.create_bucket(Bucket="other", CreateBucketConfiguration={"LocationConstraint": "cold"})
        status, _, _ = error_of(lambda: client.put_object(Bucket="other", Key="k", Body=b"x"))
        assert status == 500
    # the first gateway's object is still there (old code: deleted as a leftover)
    assert s3.get_object(Bucket=cold, Key="kept")["Body"].read() == b"a" * 1000


def test_data_a_delete_could_not_free_is_freed_once_the_backend_is_back(
    tmp_path: Path, backend: Service, back: Any
) -> None:
    """A DELETE while the backend is down drops the metadata (204, as S3 answers) and records
    the data in the store's pending_frees: the next cleanup pass frees it, whatever its bound
    on orphans. It was only logged, and an outage of many deletes left the data for good."""
    with switch_proxy(backend.url) as proxy:
        config = front_config(proxy.url, prefix="frees/")
        with running_gateway(tmp_path / "data", config=config) as svc:
            client = s3_client(svc.url, connect_timeout=5, read_timeout=60)
            client.create_bucket(Bucket="gone", CreateBucketConfiguration={"LocationConstraint": "cold"})
            before = set(_keys(back, "frees/"))
            client.put_object(Bucket="gone", Key="k", Body=b"a" * 1000)
            (stored,) = set(_keys(back, "frees/")) - before
            proxy.mode = "close"
            client.delete_object(Bucket="gone", Key="k")
            assert error_of(lambda: client.head_object(Bucket="gone", Key="k"))[0] == 404
            proxy.mode = "pass"
            assert stored in _keys(back, "frees/")  # not freed yet
        with running_gateway(tmp_path / "data", config=config):
            wait_until(lambda: stored not in _keys(back, "frees/"), timeout=60,
                       what="the cleanup pass to free the data the delete could not")


def _keys(back: Any, prefix: str) -> list[str]:
    pages = back.get_paginator("list_objects_v2").paginate(Bucket=BACKEND_BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_two_first_starts_at_once_cannot_both_adopt_a_prefix(backend: Service) -> None:
    """Both gateways find no marker, then both write one: the write is conditional
    (If-None-Match: *), so the second keeps the first's marker and refuses the prefix. It
    was unconditional: each read its own back, and both adopted it (an adversarial review's
    interleaving, driven step by step here)."""
    from crossbeat.repositories.errors import RepositoryError
    from crossbeat.repositories.s3 import S3Repository

    first = S3Repository("cold", s3_client(backend.url), BACKEND_BUCKET, prefix="race/", owner="gateway-A")
    second = S3Repository("cold", s3_client(backend.url), BACKEND_BUCKET, prefix="race/", owner="gateway-B")
    assert first._marker_owner() is None and second._marker_owner() is None  # both look first
    first._write_marker()
    second._write_marker()  # what the second start does next, having seen no marker
    first.claim()
    with pytest.raises(RepositoryError, match="gateway-A"):
        second.claim()
