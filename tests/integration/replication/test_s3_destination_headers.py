"""What an S3 destination's replica keeps of its source version beyond the bytes.

`ReplicationProcessor.process_batch` against two real gateways (no Spark, no broker), site
b written as a foreign S3 endpoint (`type = "s3"`, boto3): the headers stored with the
version (Cache-Control, Content-Disposition, Content-Encoding, Content-Language, Expires,
x-amz-website-redirect-location) and its storage class reach the replica on the single
PutObject path and on the multipart one; user metadata that is not ASCII travels as S3
represents it (RFC 2047 encoded words), and so do stored headers that are not; a storage
class the destination refuses is left out; a version boto3 will not send fails at once,
without retries, saying why.
"""

from __future__ import annotations

import base64
import gzip
import http.server
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from email.header import decode_header, make_header
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from crossbeat.extensions.replication.destinations import S3Destination
from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.gateway import GatewayClient
from crossbeat.extensions.replication.messages import ReplicationEntry, ReplicationOutcome
from crossbeat.extensions.replication.processor import ReplicationProcessor
from crossbeat.extensions.replication.settings import (
    Endpoint,
    ReplicationSettings,
    RetrySettings,
    SiteSettings,
)
from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client
from tests.support.procs import Service
from tests.support.replication import replication_rule as rule

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
MiB = 1024 * 1024
# above the multipart threshold (5 MiB, the least allowed): two parts, the last short
SIZES = {"single": 1000, "multipart": 5 * MiB + 1000}


# what the replica must show as the source does (HEAD), besides metadata, tags and bytes
HEAD_FIELDS = ("ContentType", "CacheControl", "ContentDisposition", "ContentEncoding",
               "ContentLanguage", "ExpiresString", "WebsiteRedirectLocation", "StorageClass",
               "ContentLength")
DRESSED: dict[str, Any] = {
    "ContentType": "text/csv",
    "CacheControl": "max-age=60, public",
    "ContentDisposition": 'attachment; filename="report.csv"',
    # not gzip: the source client decodes what urllib3 can (see test_gzip_data_arrives_as_stored)
    "ContentEncoding": "compress",
    "ContentLanguage": "fr-CA",
    "Expires": datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC),
    "WebsiteRedirectLocation": "/elsewhere.html",
    "StorageClass": "STANDARD_IA",
    "Metadata": {"colour": "green"},
    "Tagging": "team=blue",
}


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    root = Path(tmp_path_factory.mktemp("s3-destination"))
    with running_gateway(root / "a") as a, running_gateway(root / "b") as b:
        yield a, b


def settings(source: str, site: str) -> ReplicationSettings:
    return ReplicationSettings(
        access_key=ROOT_AK, secret_key=ROOT_SK,  # type: ignore[arg-type]
        source=Endpoint(endpoint=source),
        sites={"b": SiteSettings(endpoint=site, type="s3")},
        multipart_threshold_bytes=5 * MiB, part_size_bytes=5 * MiB,
        retry=RetrySettings(max_attempts=4, max_seconds=2, backoff_min_s=0.05, backoff_max_s=0.1),
        unavailable_hold_s=0,
    )


def bucket_pair(gateways: tuple[Service, Service], name: str) -> tuple[Any, Any]:
    sa, sb = s3_client(gateways[0].url), s3_client(gateways[1].url)
    for client in (sa, sb):
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    sa.put_bucket_replication(Bucket=name, ReplicationConfiguration=rule(name))
    return sa, sb


def replicate(gateways: tuple[Service, Service], bucket: str, site: str | None = None) -> dict[str, ReplicationOutcome]:
    """key → the outcome of replicating its (one) version to site b (or `site`, b's URL)."""
    sa = s3_client(gateways[0].url)
    listed = sa.list_object_versions(Bucket=bucket).get("Versions", [])
    entries = [ReplicationEntry(seq=0, bucket=bucket, key=v["Key"], versionId=v["VersionId"],
                                isDeleteMarker=False, sites=("b",), ts="") for v in listed]
    processor = ReplicationProcessor(settings(gateways[0].url, site or gateways[1].url), "b")
    return {o.key: o for o in processor.process_batch(entries)}


def raw_put(url: str, bucket: str, key: str, body: bytes, headers: dict[str, bytes]) -> None:
    """PUT with header values as raw bytes (UTF-8 where a client sent UTF-8), signed."""
    target = f"{url}/{bucket}/{key}"
    # signed over the values as the gateway reads them: latin-1, one character per byte
    req = AWSRequest(method="PUT", url=target, data=body,
                     headers={k: v.decode("latin-1") for k, v in headers.items()})
    S3SigV4Auth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    sent = [(k.encode(), v.encode("latin-1")) for k, v in req.headers.items()]
    r = httpx.put(target, content=body, headers=sent, timeout=60)
    assert r.status_code == 200, r.text


def form_put(s3: Any, url: str, bucket: str, key: str, body: bytes, fields: dict[str, str]) -> None:
    """A browser-form upload (POST Object) with `fields`, UTF-8 encoded as browsers send."""
    presigned = s3.generate_presigned_post(bucket, key, Fields=fields,
                                           Conditions=[{k: v} for k, v in fields.items()])
    boundary = "----crossbeat-s3-destination-form"

    def part(name: str, value: str) -> bytes:
        return (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
                f"{value}\r\n").encode()

    content = b"".join(part(k, v) for k, v in {**presigned["fields"], **fields}.items())
    content += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode()
    content += body + f"\r\n--{boundary}--\r\n".encode()
    r = httpx.post(f"{url}/{bucket}", content=content, timeout=60,
                   headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 204, r.text


def head_fields(s3: Any, bucket: str, key: str) -> dict[str, Any]:
    head = s3.head_object(Bucket=bucket, Key=key)
    shown = {f: head.get(f) for f in HEAD_FIELDS}
    shown["Metadata"] = {k: v for k, v in head["Metadata"].items() if not k.startswith("crossbeat-")}
    return shown


def encoded_word(text: str) -> str:
    return f"=?UTF-8?B?{base64.b64encode(text.encode()).decode()}?="


@pytest.mark.parametrize("size", list(SIZES))
def test_stored_headers_and_storage_class_reach_the_replica(
    gateways: tuple[Service, Service], size: str,
) -> None:
    bucket = f"headers-{size}"
    sa, sb = bucket_pair(gateways, bucket)
    body = b"z" * SIZES[size]
    sa.put_object(Bucket=bucket, Key="dressed", Body=body, **DRESSED)
    sa.put_object(Bucket=bucket, Key="plain", Body=body)  # STANDARD: no class sent or shown
    # S3 keeps an Expires it cannot read as it was sent (boto3 shows it as ExpiresString)
    raw_put(gateways[0].url, bucket, "odd-expires", body, {"expires": b"0", "cache-control": b"no-store"})

    outcomes = replicate(gateways, bucket)

    assert {k: (o.status, o.attempts) for k, o in outcomes.items()} == {
        k: ("COMPLETED", 1) for k in ("dressed", "plain", "odd-expires")}, [o.error for o in outcomes.values()]
    for key in outcomes:
        assert head_fields(sb, bucket, key) == head_fields(sa, bucket, key), key
        assert sb.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    dressed = sb.head_object(Bucket=bucket, Key="dressed")
    assert (dressed["ContentEncoding"], dressed["StorageClass"], dressed["Expires"]) == (
        "compress", "STANDARD_IA", DRESSED["Expires"])
    assert sb.head_object(Bucket=bucket, Key="odd-expires")["ExpiresString"] == "0"
    assert "StorageClass" not in sb.head_object(Bucket=bucket, Key="plain")
    assert sb.get_object_tagging(Bucket=bucket, Key="dressed")["TagSet"] == [{"Key": "team", "Value": "blue"}]


@pytest.mark.parametrize("size", list(SIZES))
def test_metadata_and_headers_that_are_not_ascii_replicate_as_rfc2047_encoded_words(
    gateways: tuple[Service, Service], size: str,
) -> None:
    bucket = f"non-ascii-{size}"
    sa, sb = bucket_pair(gateways, bucket)
    url, body = gateways[0].url, b"m" * SIZES[size]
    # a form's fields are text: 'café', and characters past latin-1
    form_put(sa, url, bucket, "form", body, {"x-amz-meta-name": "café", "x-amz-meta-city": "東京",
                                             "x-amz-meta-plain": "ascii stays"})
    # a header's bytes as a client sent them: UTF-8, kept one character per byte
    raw_put(url, bucket, "header", body, {"x-amz-meta-name": "café".encode(),
                                          "x-amz-meta-city": "東京".encode(),
                                          "content-disposition": 'attachment; filename="café.txt"'.encode()})

    outcomes = replicate(gateways, bucket)

    assert {k: (o.status, o.attempts) for k, o in outcomes.items()} == {
        "form": ("COMPLETED", 1), "header": ("COMPLETED", 1)}, [o.error for o in outcomes.values()]
    form = sb.head_object(Bucket=bucket, Key="form")["Metadata"]
    assert (form["name"], form["city"], form["plain"]) == (
        encoded_word("café"), encoded_word("東京"), "ascii stays")
    head = sb.head_object(Bucket=bucket, Key="header")
    header = head["Metadata"]
    assert (header["name"], header["city"]) == (encoded_word("café"), encoded_word("東京"))
    assert header["crossbeat-replication-status"] == "REPLICA"
    # S3 has no other form for a header that is not ASCII: sent as it is, boto3's SigV4
    # signature of it does not match what the destination reads (SignatureDoesNotMatch)
    assert head["ContentDisposition"] == encoded_word('attachment; filename="café.txt"')
    # what any RFC 2047 decoder reads back
    assert str(make_header(decode_header(header["city"]))) == "東京"


def test_a_version_boto3_will_not_send_fails_at_once_saying_why(gateways: tuple[Service, Service]) -> None:
    bucket = "unsendable"
    sa, _ = bucket_pair(gateways, bucket)
    url = gateways[0].url
    sa.put_object(Bucket=bucket, Key="named", Body=b"n", Metadata={"name": "x"})
    vid = sa.head_object(Bucket=bucket, Key="named")["VersionId"]
    source = GatewayClient(Endpoint(endpoint=url, access_key=ROOT_AK, secret_key=ROOT_SK))  # type: ignore[arg-type]
    md = source.get_metadata(bucket, "named", vid)
    assert md is not None
    # a metadata name that is not ASCII (no gateway stores one): boto3 refuses to build the
    # request, so nothing was sent and no retry can do better
    md["userMetadata"] = {"naïve": "x"}
    destination = S3Destination(settings(url, gateways[1].url).site("b"), threshold=5 * MiB, part_size=5 * MiB)
    try:
        with pytest.raises(ReplicationError) as refused:
            destination.replicate(md, source)
    finally:
        destination.close()
        source.close()
    assert not refused.value.retryable, refused.value
    assert "cannot be sent" in str(refused.value) and "naïve" in str(refused.value)


class RefusingClasses:
    """An S3 endpoint that offers fewer storage classes than AWS (as MinIO without tiers or
    a Ceph zone without that placement): a proxy before a gateway that answers 400
    InvalidStorageClass to a request asking for one of `refused`, and relays the rest."""

    def __init__(self, upstream: str, refused: set[str]) -> None:
        self.refused: list[str] = []  # the requests refused, "METHOD path"
        client = self.client = httpx.Client(base_url=upstream, timeout=60)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("x-amz-storage-class") in refused:
                    proxy.refused.append(f"{self.command} {self.path}")
                    answer = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>"
                              b"InvalidStorageClass</Code><Message>The storage class you "
                              b"specified is not valid</Message></Error>")
                    self.send_response(400)
                    self.send_header("content-type", "application/xml")
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                headers = [(k, v) for k, v in self.headers.items() if k.lower() != "connection"]
                with client.stream(self.command, self.path, headers=headers, content=body) as r:
                    data = b"".join(r.iter_raw())
                self.send_response(r.status_code)
                for k, v in r.headers.multi_items():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                # a HEAD's length is the object's, there is no body to count
                length = r.headers.get("content-length") if self.command == "HEAD" else None
                self.send_header("content-length", length or str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = relay

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


def test_a_storage_class_the_destination_refuses_is_left_out(gateways: tuple[Service, Service]) -> None:
    proxy = RefusingClasses(gateways[1].url, {"GLACIER"})
    try:
        for size in SIZES:
            bucket = f"refused-class-{size}"
            sa, sb = bucket_pair(gateways, bucket)
            sa.put_object(Bucket=bucket, Key="k", Body=b"g" * SIZES[size], StorageClass="GLACIER",
                          CacheControl="max-age=5")
            outcomes = replicate(gateways, bucket, site=proxy.url)
            assert (outcomes["k"].status, outcomes["k"].attempts) == ("COMPLETED", 1), outcomes["k"].error
            head = sb.head_object(Bucket=bucket, Key="k")
            assert "StorageClass" not in head and head["CacheControl"] == "max-age=5", size
    finally:
        proxy.close()
    # asked once on each path (PutObject, CreateMultipartUpload), then written without it
    assert proxy.refused == ["PUT /refused-class-single/k", "POST /refused-class-multipart/k?uploads"]


@pytest.mark.parametrize("plain", [b"a line of text\n" * 1000, os.urandom(2 * 1024 * 1024)], ids=["small", "2MiB"])
def test_gzip_data_arrives_as_stored(gateways: tuple[Service, Service], plain: bytes) -> None:
    """An object stored with Content-Encoding: gzip is those bytes, at the destination too.
    The source was read through urllib3, which decompressed it: the replica held the plain
    text without its Content-Encoding (or, since the size check, failed)."""
    bucket = f"gzipped-{len(plain)}"
    sa, sb = bucket_pair(gateways, bucket)
    body = gzip.compress(plain)
    sa.put_object(Bucket=bucket, Key="k.txt.gz", Body=body, ContentEncoding="gzip", ContentType="text/plain")

    outcomes = replicate(gateways, bucket)

    assert outcomes["k.txt.gz"].status == "COMPLETED", outcomes["k.txt.gz"].error
    got = sb.get_object(Bucket=bucket, Key="k.txt.gz")
    assert (got["ContentEncoding"], got["Body"].read()) == ("gzip", body)
