"""Bad input to the internal routes is refused with a 400 naming what is wrong, and changes
nothing (it was a 500 with a traceback, or worse, stored: a version without a size broke
every GET of its object and every listing of its bucket). And a journal long-poll whose
client hangs up gives its polling thread back."""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.gateway import signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration


def _last_seq(url: str) -> int:
    r = signed("GET", f"{url}/_/crossbeat/journal?after=0&limit=10000")
    lines = [json.loads(line) for line in r.text.splitlines() if line]
    return lines[-1]["seq"] if lines else 0


@pytest.mark.parametrize(
    "query",
    ["after=-1", f"after={2**63}", "after=%2B1", "after=1_0", "wait=abc", "wait=0x10", "wait=-1",
     "wait=nan", "limit=0", "limit=-5"],
)
def test_bad_journal_parameters_are_400(gateway: Service, query: str) -> None:
    r = signed("GET", f"{gateway.url}/_/crossbeat/journal?{query}")
    assert r.status_code == 400 and b"InvalidArgument" in r.content, (r.status_code, r.text)


@pytest.mark.parametrize("query", ["seq=-1", "consumer=&seq=1", "seq=1", "consumer=c", f"consumer=c&seq={2**64}"])
def test_bad_checkpoints_are_400(gateway: Service, query: str) -> None:
    r = signed("POST", f"{gateway.url}/_/crossbeat/journal/checkpoint?{query}")
    assert r.status_code == 400 and b"InvalidArgument" in r.content, (r.status_code, r.text)


@pytest.mark.parametrize(
    "body", [b"", b"{", b"[]", b"null", b'{"locations": "abc"}', b'{"locations": [1, 2]}',
             b'{"locations": [{"dataKey": "x"}]}'],
)
def test_bad_batch_deletes_are_400(gateway: Service, body: bytes) -> None:
    r = signed("POST", f"{gateway.url}/_/crossbeat/batchDelete", body)
    assert r.status_code == 400 and b"MalformedJSON" in r.content, (r.status_code, r.text)


def test_data_to_an_unknown_location_is_400(gateway: Service, bucket: str) -> None:
    r = signed("PUT", f"{gateway.url}/_/crossbeat/data/{bucket}/k?location=nosuch", b"x")
    assert r.status_code == 400 and b"InvalidArgument" in r.content, r.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"size": "x"}, "size"),
        ({"size": -1}, "size"),
        ({"size": None}, "size"),
        ({"etag": None}, "etag"),
        ({"lastModified": "not-a-date"}, "lastModified"),
        ({"location": "abc"}, "location"),
        ({"location": [{"dataKey": 1}]}, "location"),
        ({"location": []}, "location"),
        ({"isDeleteMarker": "yes"}, "isDeleteMarker"),
        # what GET and HEAD would echo as headers, and the id they are asked for by
        ({"userMetadata": {"colour": "a\r\nX-Injected: 1"}}, "x-amz-meta-colour"),
        ({"userMetadata": {"a b": "c"}}, "x-amz-meta-a b"),
        ({"userMetadata": {"n": 1}}, "x-amz-meta-n"),
        ({"userMetadata": ["x"]}, "userMetadata"),
        ({"systemHeaders": {"content-disposition": "nul\x00"}}, "content-disposition"),
        ({"contentType": "text/plain\n"}, "content-type"),
        ({"versionId": "with space"}, "versionId"),
    ],
)
def test_metadata_the_gateway_cannot_serve_is_refused(
    gateway: Service, s3: Any, bucket: str, change: dict[str, Any], field: str
) -> None:
    url = gateway.url
    s3.put_object(Bucket=bucket, Key="k", Body=b"payload")
    meta = signed("GET", f"{url}/_/crossbeat/metadata/{bucket}/k?versionId=null").json()
    before = _last_seq(url)
    bad = dict(meta, **change)
    for doc in ({"metadata": bad, "expectedRevision": meta["revision"]},
                {"metadata": dict(bad, sortKey=meta["sortKey"]), "create": True}):
        r = signed("PUT", f"{url}/_/crossbeat/metadata/{bucket}/k?versionId=null", json.dumps(doc).encode())
        assert r.status_code == 400 and field.encode() in r.content, (r.status_code, r.text)
    r = signed("POST", f"{url}/_/crossbeat/batchUpdate",
               json.dumps({"updates": [{"metadata": bad, "expectedRevision": meta["revision"]}]}).encode())
    assert r.status_code == 400 and field.encode() in r.content, (r.status_code, r.text)
    # nothing changed: the object reads and lists as before, no journal entry
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"payload"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert _last_seq(url) == before


@pytest.mark.parametrize("expected", ["abc", None, 1.5, True])
def test_a_revision_that_is_not_an_integer_is_refused(
    gateway: Service, s3: Any, bucket: str, expected: Any
) -> None:
    url = gateway.url
    s3.put_object(Bucket=bucket, Key="k", Body=b"payload")
    meta = signed("GET", f"{url}/_/crossbeat/metadata/{bucket}/k?versionId=null").json()
    r = signed("PUT", f"{url}/_/crossbeat/metadata/{bucket}/k?versionId=null",
               json.dumps({"metadata": meta, "expectedRevision": expected}).encode())
    assert r.status_code == 400 and b"expectedRevision" in r.content, (r.status_code, r.text)


def test_a_long_poll_whose_client_hangs_up_frees_its_thread(gateway: Service) -> None:
    """200 long-polls (more than the polling threads of every gateway process) whose clients
    hang up: each held a polling thread for its whole wait, so a poll after them waited
    behind them for most of a minute."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.support.gateway import ROOT_AK, ROOT_SK

    url = urlsplit(gateway.url)
    far = _last_seq(gateway.url)  # the end: nothing comes while the test runs
    path = f"/_/crossbeat/journal?after={far}&wait=30"
    req = AWSRequest(method="GET", url=f"{gateway.url}{path}")
    S3SigV4Auth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    head = f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host") + "\r\n"
    socks = []
    for _ in range(200):
        s = socket.create_connection((url.hostname, url.port), timeout=10)
        s.sendall(head.encode())
        socks.append(s)
    time.sleep(0.5)  # not synchronisation: the polls must have been taken up before the hang-up
    for s in socks:
        s.close()
    started = time.monotonic()
    r = signed("GET", f"{gateway.url}/_/crossbeat/journal?after={far}&wait=1")
    assert r.status_code == 200 and r.text == ""
    assert time.monotonic() - started < 10


def test_a_version_written_by_a_replica_route_is_a_replica(gateway: Service, s3: Any, bucket: str) -> None:
    """Whatever status the caller sends (none, or PENDING, which would have the destination
    replicate it again), a version created through metadata create or replica is REPLICA."""
    url = gateway.url
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})  # replicas need it
    vid = s3.put_object(Bucket=bucket, Key="src", Body=b"payload")["VersionId"]
    meta = signed("GET", f"{url}/_/crossbeat/metadata/{bucket}/src?versionId={vid}").json()
    data = signed("PUT", f"{url}/_/crossbeat/data/{bucket}/plain", b"payload").json()
    plain = {k: v for k, v in meta.items() if k != "replicationInfo"}
    plain.update(key="plain", versionId="v-plain", sortKey="0" * 26, location=data["location"])
    r = signed("PUT", f"{url}/_/crossbeat/metadata/{bucket}/plain?versionId=v-plain",
               json.dumps({"metadata": plain, "create": True}).encode())
    assert r.status_code == 200, r.text
    pending = dict(plain, key="pending", versionId="v-pending",
                   replicationInfo={"status": "PENDING", "role": "", "storageClass": "b", "content": [],
                                    "backends": [{"site": "b", "status": "PENDING"}], "preferredRead": ""})
    import base64

    header = base64.urlsafe_b64encode(json.dumps(pending).encode()).decode()
    r = signed("PUT", f"{url}/_/crossbeat/replica/{bucket}/pending?versionId=v-pending", b"payload",
               headers={"x-amz-crossbeat-metadata": header})
    assert r.status_code == 200, r.text
    for key in ("plain", "pending"):
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["ReplicationStatus"] == "REPLICA", key


@pytest.mark.parametrize(
    ("method", "route", "status"),
    [("GET", "nosuch", 404), ("GET", "JOURNAL", 404), ("GET", "journal/nosuch", 404),
     ("POST", "batchDelete/x", 404), ("GET", "replication/nosuch", 404), ("GET", "metadata", 404),
     ("DELETE", "journal", 405), ("GET", "batchDelete", 405)],
)
def test_unknown_internal_routes_are_404_and_wrong_methods_405(
    gateway: Service, method: str, route: str, status: int
) -> None:
    r = signed(method, f"{gateway.url}/_/crossbeat/{route}")
    assert r.status_code == status, (r.status_code, r.text)


def test_metadata_get_names_what_is_missing(gateway: Service, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for path, error in ((f"nosuchbucket-{bucket}/k", "NoSuchBucket"), (f"{bucket}/nokey", "NoSuchKey"),
                        (f"{bucket}/k?versionId=nosuch", "NoSuchVersion")):
        r = signed("GET", f"{gateway.url}/_/crossbeat/metadata/{path}")
        assert r.status_code == 404 and r.json()["error"] == error, (path, r.text)


def test_a_reader_ahead_of_the_journal_is_told(gateway: Service) -> None:
    """A reader past the last entry follows another journal (a replaced data dir): it gets a
    409 naming the last seq at once, instead of waiting for entries that never come."""
    last = _last_seq(gateway.url)
    started = time.monotonic()
    r = signed("GET", f"{gateway.url}/_/crossbeat/journal?after={last + 5}&wait=20")
    assert r.status_code == 409 and r.json()["error"] == "AheadOfJournal"
    assert r.json()["lastSeq"] >= last and time.monotonic() - started < 10
    assert signed("GET", f"{gateway.url}/_/crossbeat/journal?after={last}").status_code == 200


def test_the_populators_journal_client_raises_journal_ahead(gateway: Service) -> None:
    from crossbeat.populator.auth import SigV4HttpxAuth
    from crossbeat.populator.journal import JournalAhead, JournalClient
    from tests.support.gateway import ROOT_AK, ROOT_SK

    client = JournalClient(gateway.url, SigV4HttpxAuth(ROOT_AK, ROOT_SK))
    last = _last_seq(gateway.url)
    assert client.read(last, 10) == []
    with pytest.raises(JournalAhead) as exc:
        client.read(last + 1, 10, wait=5)
    assert exc.value.last_seq >= last


@pytest.mark.parametrize("secret", ["wrong-secret", None])
def test_the_populators_journal_client_names_refused_credentials(gateway: Service, secret: str | None) -> None:
    from crossbeat.populator.auth import SigV4HttpxAuth
    from crossbeat.populator.journal import JournalClient, JournalRefused
    from tests.support.gateway import ROOT_AK, USER_AK, USER_SK

    # a wrong secret for the admin, or a user that is not the admin
    auth = SigV4HttpxAuth(ROOT_AK, secret) if secret else SigV4HttpxAuth(USER_AK, USER_SK)
    client = JournalClient(gateway.url, auth)
    with pytest.raises(JournalRefused, match="CROSSBEAT_ACCESS_KEY"):
        client.read(0, 10)
    with pytest.raises(JournalRefused):
        client.checkpoint("refused", 0)
