"""Numbers in query strings and headers are ASCII decimal, as S3 reads them: a superscript
digit ("²", which str.isdigit() accepts and int() refuses) was a 500; other scripts' digits
("٣", which int() reads as 3) were taken as numbers. Each is the field's own 400 now, and
changes nothing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest

from tests.support.gateway import signed
from tests.support.procs import Service

pytestmark = pytest.mark.integration

SUPERSCRIPT_TWO = "%C2%B2"
ARABIC_THREE = "%D9%A3"


def code(r: httpx.Response) -> str:
    return ET.fromstring(r.content).findtext("Code") or ""


@pytest.mark.parametrize("digit", [SUPERSCRIPT_TWO, ARABIC_THREE])
def test_list_limits(gateway: Service, bucket: str, digit: str) -> None:
    for url in (f"{gateway.url}/?max-buckets={digit}", f"{gateway.url}/{bucket}?list-type=2&max-keys={digit}",
                f"{gateway.url}/{bucket}?uploads&max-uploads={digit}"):
        r = signed("GET", url)
        assert (r.status_code, code(r)) == (400, "InvalidArgument"), (url, r.text)


@pytest.mark.parametrize("digit", [SUPERSCRIPT_TWO, ARABIC_THREE])
def test_part_numbers(gateway: Service, s3: Any, bucket: str, digit: str) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    r = signed("PUT", f"{gateway.url}/{bucket}/mp?partNumber={digit}&uploadId={upload}", b"data")
    assert (r.status_code, code(r)) == (400, "InvalidArgument"), r.text
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload).get("Parts", []) == []
    s3.put_object(Bucket=bucket, Key="src", Body=b"0123456789")
    r = signed("PUT", f"{gateway.url}/{bucket}/mp?partNumber=1&uploadId={upload}",
               headers={"x-amz-copy-source": f"/{bucket}/src", "x-amz-copy-source-range": "bytes=\u00b2-3"})
    assert (r.status_code, code(r)) == (400, "InvalidArgument"), r.text
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload).get("Parts", []) == []


def test_a_conditional_delete_size(gateway: Service, s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"abc")
    r = signed("DELETE", f"{gateway.url}/{bucket}/k", headers={"x-amz-if-match-size": "\u00b3"})
    assert (r.status_code, code(r)) == (400, "InvalidArgument"), r.text
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"abc"
