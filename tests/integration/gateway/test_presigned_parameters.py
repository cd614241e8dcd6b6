"""A SigV4 presigned URL may carry, in its query, the `x-amz-*` headers it signs: the JS SDK
v3 presigner moves every one there (x-amz-meta-*, x-amz-tagging, x-amz-storage-class,
x-amz-acl, x-amz-copy-source, ...), and S3 applies them as the headers they stand for.
They were ignored: a presigned PUT lost its metadata and tags, an ACL or legal hold that a
header would have had refused was not, and a presigned copy stored an empty object over
its target. The checksum values an
upload's query carries are left alone, as S3 leaves them (the JS SDK presigns the CRC32 of
an empty body, `AAAAAA==`, which a real upload never matches)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client
from tests.support.procs import Service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
BUCKET = "presigned-params"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("presigned")) / "data") as svc:
        s3_client(svc.url).create_bucket(Bucket=BUCKET)
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    return s3_client(gateway.url)


def presigned(gateway: Service, method: str, key: str, params: dict[str, str]) -> str:
    """A presigned URL whose query holds `params` (signed, as the JS SDK v3 makes them)."""
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items())
    req = AWSRequest(method=method, url=f"{gateway.url}/{BUCKET}/{quote(key)}" + (f"?{query}" if query else ""))
    S3SigV4QueryAuth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1", expires=300).add_auth(req)
    return str(req.url)


def test_metadata_tags_and_class_in_the_query_are_applied(gateway: Service, s3: Any) -> None:
    url = presigned(gateway, "PUT", "meta", {
        "x-amz-meta-color": "blue", "x-amz-meta-city": "Zürich", "x-amz-tagging": "team=x",
        "x-amz-storage-class": "STANDARD_IA", "x-amz-checksum-crc32": "AAAAAA==",
        "x-amz-sdk-checksum-algorithm": "CRC32"})
    r = httpx.put(url, content=b"payload")
    assert r.status_code == 200, r.text
    got = s3.head_object(Bucket=BUCKET, Key="meta")
    # (non-ASCII metadata is answered as S3 answers it: an RFC 2047 encoded word)
    assert got["Metadata"] == {"color": "blue", "city": "=?UTF-8?B?WsO8cmljaA==?="}
    assert got["StorageClass"] == "STANDARD_IA"
    assert s3.get_object_tagging(Bucket=BUCKET, Key="meta")["TagSet"] == [{"Key": "team", "Value": "x"}]


def test_what_a_header_would_refuse_is_refused_from_the_query(gateway: Service, s3: Any) -> None:
    for params, code in (({"x-amz-acl": "public-read"}, "AccessControlListNotSupported"),
                         ({"x-amz-object-lock-legal-hold": "ON"}, "InvalidRequest")):
        r = httpx.put(presigned(gateway, "PUT", "refused", params), content=b"x")
        assert r.status_code == 400 and f"<Code>{code}</Code>" in r.text, r.text
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="refused").get("KeyCount") == 0


def test_a_presigned_copy_copies(gateway: Service, s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="source", Body=b"the source")
    s3.put_object(Bucket=BUCKET, Key="target", Body=b"precious")
    r = httpx.put(presigned(gateway, "PUT", "target", {"x-amz-copy-source": f"/{BUCKET}/source"}))
    assert r.status_code == 200 and "<CopyObjectResult" in r.text, r.text
    assert s3.get_object(Bucket=BUCKET, Key="target")["Body"].read() == b"the source"


def test_checksum_mode_in_the_query_returns_the_checksum(gateway: Service, s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="summed", Body=b"abc", ChecksumAlgorithm="CRC32C")
    req = AWSRequest(method="GET", url=f"{gateway.url}/{BUCKET}/summed?x-amz-checksum-mode=ENABLED")
    S3SigV4QueryAuth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1", expires=300).add_auth(req)
    r = httpx.get(str(req.url))
    assert r.status_code == 200 and r.headers.get("x-amz-checksum-crc32c"), r.headers
