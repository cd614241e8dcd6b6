"""POST Object: HTML form uploads (boto3's generate_presigned_post) against a real gateway."""

from __future__ import annotations

import base64
import email.header
import hashlib
import hmac
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import ROOT_SK, USER_AK, USER_SK, running_gateway, s3_client, signed
from tests.support.procs import Service, peak_rss_mib, rss_growth_mib

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
BOUNDARY = "----crossbeat-form-boundary-7MA4YWxkTrZu0gW"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("gw-post")) / "data"


@pytest.fixture(scope="module")
def gateway(data_dir: Path) -> Iterator[Service]:
    # this module's own gateway, so that its data directory can be inspected
    with running_gateway(data_dir) as svc:
        yield svc


@pytest.fixture(scope="module")
def s3v4(gateway: Service) -> Any:
    return s3_client(gateway.url, signature_version="s3v4")


def _part(name: str, value: str) -> bytes:
    return (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode() + b"\r\n")


def form(
    fields: dict[str, str] | list[tuple[str, str]],
    filename: str | None = "upload.bin",
    after: list[tuple[str, str]] | None = None,
) -> tuple[bytes, bytes]:
    """(what precedes the file's bytes, what follows them) of a multipart/form-data body
    with `fields` in order, then the `file` part, then the `after` fields."""
    items = fields.items() if isinstance(fields, dict) else fields
    head = b"".join(_part(n, v) for n, v in items)
    disposition = 'form-data; name="file"' + (f'; filename="{filename}"' if filename is not None else "")
    head += (f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
             "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = b"\r\n" + b"".join(_part(n, v) for n, v in after or []) + f"--{BOUNDARY}--\r\n".encode()
    return head, tail


def post(
    presigned: dict[str, Any],
    data: bytes,
    *,
    extra: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    filename: str | None = "upload.bin",
    after: list[tuple[str, str]] | None = None,
    url: str | None = None,
) -> httpx.Response:
    fields = {k: v for k, v in presigned["fields"].items() if k not in drop}
    fields.update(extra or {})
    head, tail = form(fields, filename, after)
    return httpx.post(
        url or presigned["url"], content=head + data + tail, timeout=60,
        headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"},
    )


def error(r: httpx.Response) -> tuple[str, str, dict[str, str]]:
    root = ET.fromstring(r.content)
    return root.findtext("Code") or "", root.findtext("Message") or "", {e.tag: e.text or "" for e in root}


def journal_entries(gateway: Service) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        after = out[-1]["seq"] if out else 0
        r = signed("GET", f"{gateway.url}/_/crossbeat/journal?after={after}&limit=1000")
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines() if line]
        if not lines:
            return out
        out += lines


def journal_end(url: str) -> int:
    seq, after = 0, 0
    while True:
        r = signed("GET", f"{url}/_/crossbeat/journal?after={after}&limit=1000")
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines() if line]
        if not lines:
            return seq
        seq = after = lines[-1]["seq"]


def data_files(data_dir: Path) -> set[str]:
    return {str(p.relative_to(data_dir)) for p in (data_dir / "sfs").rglob("*")} if (data_dir / "sfs").exists() else set()


def presign(s3: Any, bucket: str, key: str = "k", fields: dict[str, str] | None = None,
            conditions: list[Any] | None = None, expires: int = 600) -> dict[str, Any]:
    fields = dict(fields or {})
    conds = list(conditions or []) + [{k: v} for k, v in fields.items()]
    return s3.generate_presigned_post(bucket, key, Fields=fields, Conditions=conds, ExpiresIn=expires)


# ---------------------------------------------------------------- successful uploads


@pytest.mark.parametrize("sig", ["s3v4", "s3"])
def test_upload_answers_204_and_stores_the_file(gateway: Service, bucket: str, sig: str) -> None:
    client = s3_client(gateway.url, signature_version=sig)
    presigned = client.generate_presigned_post(bucket, "docs/a b.txt", ExpiresIn=600)
    assert ("x-amz-signature" in presigned["fields"]) == (sig == "s3v4")
    assert ("signature" in presigned["fields"]) == (sig == "s3")
    r = post(presigned, b"hello form")
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert r.headers["etag"] == f'"{hashlib.md5(b"hello form").hexdigest()}"'
    assert r.headers["location"] == f"{gateway.url}/{bucket}/docs%2Fa%20b.txt"
    assert "x-amz-version-id" not in r.headers
    got = client.get_object(Bucket=bucket, Key="docs/a b.txt")
    assert got["Body"].read() == b"hello form"
    assert got["ContentType"] == "binary/octet-stream"


@pytest.mark.parametrize(("status", "expected"), [("200", 200), ("201", 201), ("204", 204), ("404", 204)])
def test_success_action_status(s3v4: Any, gateway: Service, bucket: str, status: str, expected: int) -> None:
    presigned = presign(s3v4, bucket, "dir/k", {"success_action_status": status})
    r = post(presigned, b"abc")
    assert r.status_code == expected, r.text
    etag = f'"{hashlib.md5(b"abc").hexdigest()}"'
    assert r.headers["etag"] == etag
    if expected == 201:
        root = ET.fromstring(r.content)
        assert root.tag == "PostResponse"
        assert root.findtext("Bucket") == bucket
        assert root.findtext("Key") == "dir/k"
        assert root.findtext("ETag") == etag
        assert root.findtext("Location") == f"{gateway.url}/{bucket}/dir%2Fk" == r.headers["location"]
    else:
        assert r.content == b""


@pytest.mark.parametrize("field", ["success_action_redirect", "redirect"])
def test_redirect_goes_to_the_url_with_bucket_key_and_etag(s3v4: Any, bucket: str, field: str) -> None:
    target = "https://app.example.test/done?from=form"
    presigned = presign(s3v4, bucket, "a/b c", {field: target})
    r = post(presigned, b"redirected")
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert location.startswith(target + "&")
    query = parse_qs(urlsplit(location).query)
    assert query == {"from": ["form"], "bucket": [bucket], "key": ["a/b c"],
                     "etag": [f'"{hashlib.md5(b"redirected").hexdigest()}"']}
    assert s3v4.get_object(Bucket=bucket, Key="a/b c")["Body"].read() == b"redirected"


def test_a_post_answers_x_amz_expiration_when_a_rule_will_expire_it(s3v4: Any, bucket: str) -> None:
    s3v4.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "soon", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}}]})
    r = post(presign(s3v4, bucket, "tmp/k"), b"x")
    assert r.status_code == 204, r.text
    assert 'rule-id="soon"' in r.headers["x-amz-expiration"]
    assert "x-amz-expiration" not in post(presign(s3v4, bucket, "kept"), b"x").headers


@pytest.mark.parametrize("target", ["/relative/path", "https://app.example.test/a\r\nX-Injected: 1",
                                    "https://app.example.test/a b"])
def test_a_redirect_that_cannot_be_a_location_is_ignored(s3v4: Any, bucket: str, target: str) -> None:
    presigned = presign(s3v4, bucket, "k", {"success_action_redirect": target})
    r = post(presigned, b"x")
    # the 204 names the object's own URL, not the redirect's
    assert r.status_code == 204 and not r.headers["location"].startswith("https://app."), r.headers
    assert s3v4.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"


def test_filename_is_substituted_into_the_key(s3v4: Any, bucket: str) -> None:
    presigned = s3v4.generate_presigned_post(bucket, "uploads/${filename}", ExpiresIn=600)
    r = post(presigned, b"jpeg bytes", filename="photo 1.jpg")
    assert r.status_code == 204, r.text
    assert s3v4.get_object(Bucket=bucket, Key="uploads/photo 1.jpg")["Body"].read() == b"jpeg bytes"


def test_metadata_content_type_and_other_fields_are_applied(s3v4: Any, bucket: str) -> None:
    tagging = "<Tagging><TagSet><Tag><Key>team</Key><Value>blue</Value></Tag></TagSet></Tagging>"
    fields = {
        "Content-Type": "text/plain; charset=utf-8",
        "Cache-Control": "max-age=60",
        "Content-Disposition": 'attachment; filename="n.txt"',
        "x-amz-meta-Colour": "green",
        "x-amz-storage-class": "STANDARD_IA",
        "acl": "private",
        "tagging": tagging,
    }
    presigned = presign(s3v4, bucket, "meta", fields)
    r = post(presigned, b"with metadata")
    assert r.status_code == 204, r.text
    head = s3v4.head_object(Bucket=bucket, Key="meta")
    assert head["ContentType"] == "text/plain; charset=utf-8"
    assert head["CacheControl"] == "max-age=60"
    assert head["ContentDisposition"] == 'attachment; filename="n.txt"'
    assert head["Metadata"] == {"colour": "green"}
    assert head["StorageClass"] == "STANDARD_IA"
    assert s3v4.get_object_tagging(Bucket=bucket, Key="meta")["TagSet"] == [{"Key": "team", "Value": "blue"}]


def test_text_latin1_cannot_carry_is_sent_back_rfc2047_encoded(gateway: Service, s3v4: Any, bucket: str) -> None:
    """A form's fields are UTF-8 text: metadata and headers that are not ASCII come back as
    RFC 2047 encoded words, as S3 returns them, and decode to what was sent. They were sent
    with '?' for each character latin-1 cannot carry ('??.txt'): lost for good. The 2 KB
    limit counts their UTF-8 bytes."""
    fields = {"x-amz-meta-name": "日本.txt", "x-amz-meta-city": "Zürich",
              "Content-Disposition": 'attachment; filename="日本.txt"'}
    r = post(presign(s3v4, bucket, "utf8", fields), b"x")
    assert r.status_code == 204, r.text
    head = s3v4.head_object(Bucket=bucket, Key="utf8")
    words = {"name": "=?UTF-8?B?5pel5pysLnR4dA==?=", "city": "=?UTF-8?B?WsO8cmljaA==?="}
    assert head["Metadata"] == words
    assert email.header.make_header(email.header.decode_header(words["name"])).__str__() == "日本.txt"
    disposition = head["ContentDisposition"]
    assert disposition.isascii() and "日本" in str(email.header.make_header(email.header.decode_header(disposition)))
    got = signed("GET", f"{gateway.url}/{bucket}/utf8")
    assert got.headers["x-amz-meta-city"] == words["city"]
    # the journal holds the text itself
    assert any((e.get("value") or {}).get("userMetadata") == {"name": "日本.txt", "city": "Zürich"}
               for e in journal_entries(gateway))
    big = {"x-amz-meta-big": "é" * 1100}  # 1,100 characters, 2,200 bytes
    r = post(presign(s3v4, bucket, "big", big), b"x")
    assert r.status_code == 400 and "MetadataTooLarge" in r.text


def test_versioned_bucket_answers_a_version_id(s3v4: Any, vbucket: str) -> None:
    presigned = presign(s3v4, vbucket, "v")
    first = post(presigned, b"one")
    second = post(presigned, b"two")
    assert first.status_code == second.status_code == 204
    ids = [first.headers["x-amz-version-id"], second.headers["x-amz-version-id"]]
    assert "null" not in ids and ids[0] != ids[1]
    versions = s3v4.list_object_versions(Bucket=vbucket, Prefix="v")["Versions"]
    assert [v["VersionId"] for v in versions] == ids[::-1]
    assert s3v4.get_object(Bucket=vbucket, Key="v", VersionId=ids[0])["Body"].read() == b"one"


def test_the_upload_is_journaled_like_a_put(gateway: Service, s3v4: Any, bucket: str) -> None:
    before = journal_end(gateway.url)
    r = post(presign(s3v4, bucket, "journaled"), b"j")
    assert r.status_code == 204
    r = signed("GET", f"{gateway.url}/_/crossbeat/journal?after={before}&limit=100")
    entries = [json.loads(line) for line in r.text.splitlines() if line]
    assert len(entries) == 1
    assert json.dumps(entries[0]).count("journaled") >= 1


def test_checksum_fields_are_verified_and_echoed(s3v4: Any, bucket: str) -> None:
    good = base64.b64encode(hashlib.sha256(b"summed").digest()).decode()
    presigned = presign(s3v4, bucket, "summed", {"x-amz-checksum-sha256": good})
    r = post(presigned, b"summed")
    assert r.status_code == 204, r.text
    assert r.headers["x-amz-checksum-sha256"] == good


def test_x_ignore_fields_need_no_condition(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "ignored"), b"x", extra={"x-ignore-flash": "1"})
    assert r.status_code == 204, r.text


def test_fields_after_the_file_are_ignored(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "late")
    # not covered by the policy, yet accepted: S3 never looks past the file
    r = post(presigned, b"x", after=[("x-amz-meta-late", "1"), ("file", "second")])
    assert r.status_code == 204, r.text
    head = s3v4.head_object(Bucket=bucket, Key="late")
    assert head["Metadata"] == {} and head["ContentLength"] == 1


def test_empty_file(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "empty"), b"")
    assert r.status_code == 204, r.text
    assert s3v4.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""


def test_large_upload_streams_in_bounded_memory(tmp_path: Path) -> None:
    size = 96 * MiB
    block = hashlib.sha256(b"post").digest() * (MiB // 32)

    def body(head: bytes, tail: bytes) -> Iterator[bytes]:
        yield head
        for _ in range(size // MiB):
            yield block
        yield tail

    with running_gateway(tmp_path / "data") as gw:
        s3 = s3_client(gw.url, signature_version="s3v4")
        s3.create_bucket(Bucket="big")
        assert post(presign(s3, "big", "warm"), b"x").status_code == 204
        baseline = peak_rss_mib(gw)  # every gateway process: which one serves is not known
        presigned = presign(s3, "big", "big", conditions=[["content-length-range", 1, 128 * MiB]])
        head, tail = form(presigned["fields"])
        r = httpx.post(presigned["url"], content=body(head, tail), timeout=300, headers={
            "content-type": f"multipart/form-data; boundary={BOUNDARY}",
            "content-length": str(len(head) + size + len(tail)),
        })
        assert r.status_code == 204, r.text
        expected = hashlib.md5()
        for _ in range(size // MiB):
            expected.update(block)
        assert r.headers["etag"] == f'"{expected.hexdigest()}"'
        assert s3.head_object(Bucket="big", Key="big")["ContentLength"] == size
        grown = rss_growth_mib(baseline, peak_rss_mib(gw))
        assert grown < 40, f"gateway memory grew by {grown:.0f} MiB for a {size // MiB} MiB POST"


# ---------------------------------------------------------------- refusals


def test_expired_policy(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "late", expires=-60), b"x")
    assert r.status_code == 403
    assert error(r)[:2] == ("AccessDenied", "Invalid according to Policy: Policy expired.")


@pytest.mark.parametrize("sig", ["s3v4", "s3"])
def test_tampered_policy_or_signature(gateway: Service, bucket: str, sig: str) -> None:
    client = s3_client(gateway.url, signature_version=sig)
    presigned = presign(client, bucket, "t", conditions=[["content-length-range", 0, 10]])
    doc = json.loads(base64.b64decode(presigned["fields"]["policy"]))
    doc["conditions"] = [c for c in doc["conditions"] if not (isinstance(c, list) and c[0] == "content-length-range")]
    widened = base64.b64encode(json.dumps(doc).encode()).decode()
    r = post(presigned, b"x" * 100, extra={"policy": widened})
    assert r.status_code == 403
    code, _, extra = error(r)
    assert code == "SignatureDoesNotMatch"
    assert extra["StringToSign"] == widened
    sig_field = "x-amz-signature" if sig == "s3v4" else "signature"
    wrong = presigned["fields"][sig_field][::-1]
    r = post(presigned, b"x", extra={sig_field: wrong})
    assert r.status_code == 403 and error(r)[0] == "SignatureDoesNotMatch"


def test_a_field_the_policy_does_not_cover(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "k"), b"x", extra={"x-amz-meta-Note": "sneaky"})
    assert r.status_code == 403
    assert error(r)[:2] == ("AccessDenied", "Invalid according to Policy: Extra input fields: x-amz-meta-Note")


def test_a_failed_condition(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "k", conditions=[["starts-with", "$Content-Type", "image/"]])
    r = post(presigned, b"x", extra={"Content-Type": "text/html"})
    assert r.status_code == 403
    assert error(r)[:2] == ("AccessDenied", 'Invalid according to Policy: Policy Condition failed: '
                            '["starts-with", "$Content-Type", "image/"]')


@pytest.mark.parametrize(("size", "status", "code"), [
    (1, 400, "EntityTooSmall"), (5, 204, None), (10, 204, None), (12, 400, "EntityTooLarge"),
])  # fmt: skip
def test_content_length_range(s3v4: Any, bucket: str, size: int, status: int, code: str | None) -> None:
    presigned = presign(s3v4, bucket, "sized", conditions=[["content-length-range", 5, 10]])
    r = post(presigned, b"z" * size)
    assert r.status_code == status, r.text
    if code == "EntityTooLarge":
        assert error(r)[0] == code
        assert error(r)[2]["ProposedSize"] == "12" and error(r)[2]["MaxSizeAllowed"] == "10"
    elif code == "EntityTooSmall":
        assert error(r)[0] == code
        assert error(r)[2]["ProposedSize"] == "1" and error(r)[2]["MinSizeAllowed"] == "5"


def test_a_policy_for_another_bucket(s3v4: Any, gateway: Service, bucket: str) -> None:
    s3v4.create_bucket(Bucket=bucket + "-other")
    presigned = presign(s3v4, bucket + "-other", "k")
    r = post(presigned, b"x", url=f"{gateway.url}/{bucket}")
    assert r.status_code == 403
    assert error(r)[:2] == ("AccessDenied", "Invalid according to Policy: Policy Condition failed: "
                            f'["eq", "$bucket", "{bucket}-other"]')
    assert s3v4.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_another_users_credentials_on_a_bucket_they_do_not_own(gateway: Service, bucket: str) -> None:
    alice = s3_client(gateway.url, USER_AK, USER_SK, signature_version="s3v4")
    r = post(presign(alice, bucket, "intruder"), b"x")
    assert r.status_code == 403 and error(r)[0] == "AccessDenied"
    alice.create_bucket(Bucket=bucket + "-alice")
    # the same credentials may write the bucket they own
    assert post(presign(alice, bucket + "-alice", "mine"), b"x").status_code == 204


def test_unknown_access_key(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "k")
    credential = presigned["fields"]["x-amz-credential"].replace(presigned["fields"]["x-amz-credential"].split("/")[0], "NOSUCHKEY")
    r = post(presigned, b"x", extra={"x-amz-credential": credential})
    assert r.status_code == 403 and error(r)[0] == "InvalidAccessKeyId"


def test_anonymous_form_is_denied(gateway: Service, bucket: str) -> None:
    head, tail = form({"key": "anon"})
    r = httpx.post(f"{gateway.url}/{bucket}", content=head + b"x" + tail,
                   headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert r.status_code == 403 and error(r)[0] == "AccessDenied"


@pytest.mark.parametrize(("drop", "named"), [
    (("x-amz-signature",), "X-Amz-Signature"), (("x-amz-algorithm",), "X-Amz-Algorithm"),
    (("key",), "key"), (("policy",), "Policy"),
])  # fmt: skip
def test_a_missing_field(s3v4: Any, bucket: str, drop: tuple[str, ...], named: str) -> None:
    r = post(presign(s3v4, bucket, "k"), b"x", drop=drop)
    assert r.status_code == 400
    code, message, extra = error(r)
    assert code == "InvalidArgument" and extra["ArgumentName"] == named
    assert message == (f"Bucket POST must contain a field named '{named}'.  "
                       "If it is specified, please check the order of the fields.")


def test_a_key_after_the_file_is_missing(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "k")
    r = post(presigned, b"x", drop=("key",), after=[("key", "k")])
    assert r.status_code == 400 and error(r)[2]["ArgumentName"] == "key"


def test_no_file_part(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "k")
    body = b"".join(_part(n, v) for n, v in presigned["fields"].items()) + f"--{BOUNDARY}--\r\n".encode()
    r = httpx.post(presigned["url"], content=body,
                   headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert r.status_code == 400
    assert error(r)[:2] == ("InvalidArgument", "POST requires exactly one file upload per request.")


def test_not_a_form(gateway: Service, bucket: str) -> None:
    r = httpx.post(f"{gateway.url}/{bucket}", content=b"key=k", headers={"content-type": "text/plain"})
    assert r.status_code == 412 and error(r)[0] == "PreconditionFailed"
    r = httpx.post(f"{gateway.url}/{bucket}", content=b"x", headers={"content-type": "multipart/form-data"})
    assert r.status_code == 400 and error(r)[0] == "MalformedPOSTRequest"


def test_too_much_form_before_the_file(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "k"), b"x", extra={"x-ignore-pad": "p" * 21000})
    assert r.status_code == 400
    assert error(r)[0] == "MaxPostPreDataLengthExceeded"
    assert error(r)[2]["MaxPostPreDataLengthBytes"] == "20480"


def test_an_acl_beyond_the_owner_is_refused(s3v4: Any, bucket: str) -> None:
    r = post(presign(s3v4, bucket, "k", {"acl": "public-read"}), b"x")
    assert r.status_code == 400 and error(r)[0] == "AccessControlListNotSupported"


def test_malformed_policy(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "k")
    # a policy that is not JSON, correctly signed: the signature passes, the document not
    policy = base64.b64encode(b"{not json").decode()
    fields = dict(presigned["fields"])
    fields["policy"] = policy
    fields["x-amz-signature"] = _v4_signature(fields, policy)
    r = post({"url": presigned["url"], "fields": fields}, b"x")
    assert r.status_code == 400
    assert error(r)[:2] == ("InvalidPolicyDocument", "Invalid Policy: Invalid JSON.")


def _v4_signature(fields: dict[str, str], policy: str) -> str:
    """The SigV4 POST signature of `policy` under the root user's key (computed here, not
    by the gateway's code)."""
    _, date, region, service, _ = fields["x-amz-credential"].split("/")

    def mac(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode(), "sha256").digest()

    key = mac(mac(mac(mac(("AWS4" + ROOT_SK).encode(), date), region), service), "aws4_request")
    return hmac.new(key, policy.encode(), "sha256").hexdigest()


REFUSALS = {
    "expired": lambda s3, b: post(presign(s3, b, "gone", expires=-60), b"data"),
    "bad-signature": lambda s3, b: post(presign(s3, b, "gone"), b"data", extra={"x-amz-signature": "0" * 64}),
    "extra-field": lambda s3, b: post(presign(s3, b, "gone"), b"data", extra={"x-amz-meta-x": "1"}),
    "too-large": lambda s3, b: post(presign(s3, b, "gone", conditions=[["content-length-range", 0, 3]]), b"data" * 100_000),
    "too-small": lambda s3, b: post(presign(s3, b, "gone", conditions=[["content-length-range", 10 * MiB, 20 * MiB]]), b"d" * (3 * MiB)),
    "bad-checksum": lambda s3, b: post(presign(s3, b, "gone", {"x-amz-checksum-sha256": base64.b64encode(b"\0" * 32).decode()}), b"d" * (2 * MiB)),
    "truncated": lambda s3, b: _truncated(s3, b),
}


def _truncated(s3: Any, bucket: str) -> httpx.Response:
    presigned = presign(s3, bucket, "gone")
    head, _ = form(presigned["fields"])
    # the body ends inside the file: no closing boundary
    return httpx.post(presigned["url"], content=head + b"d" * (2 * MiB),
                      headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"})


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refused_post_leaves_nothing(
    gateway: Service, data_dir: Path, s3v4: Any, vbucket: str, refusal: str
) -> None:
    seq = journal_end(gateway.url)
    files = data_files(data_dir)
    r = REFUSALS[refusal](s3v4, vbucket)
    assert 400 <= r.status_code < 500, r.text
    assert s3v4.list_object_versions(Bucket=vbucket).get("Versions", []) == []
    assert journal_end(gateway.url) == seq
    assert data_files(data_dir) == files


@pytest.mark.parametrize("field", ["x-amz-meta-colour", "Content-Disposition", "Content-Type", "Cache-Control"])
@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "nul\x00byte", "bell\x07"])
def test_a_field_that_cannot_be_a_header_is_refused(s3v4: Any, bucket: str, field: str, value: str) -> None:
    # stored, such a value would be echoed in a header of every GET and HEAD of the object
    presigned = presign(s3v4, bucket, "ctl", {field: value})
    r = post(presigned, b"data")
    assert r.status_code == 400, r.text
    assert error(r)[0] == "InvalidArgument"
    with pytest.raises(ClientError) as e:
        s3v4.head_object(Bucket=bucket, Key="ctl")
    assert e.value.response["Error"]["Code"] == "404"


def test_a_metadata_field_whose_name_cannot_be_a_header_is_refused(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "name", {"x-amz-meta-a b": "value"})
    r = post(presigned, b"data")
    assert r.status_code == 400 and error(r)[0] == "InvalidArgument", r.text
    with pytest.raises(ClientError):
        s3v4.head_object(Bucket=bucket, Key="name")


# ---------------------------------------------------------------- forms signed by hand


def resign(presigned: dict[str, Any], policy_b64: str, credential_date: str | None = None) -> dict[str, Any]:
    """`presigned` (a SigV4 form of the root user) with another policy, or another date in its
    credential, signed correctly: what reaches the policy checks is then this policy."""
    fields = dict(presigned["fields"])
    _, date, region, service, end = fields["x-amz-credential"].split("/")
    date = credential_date or date
    fields["x-amz-credential"] = "/".join(("CBTESTROOTACCESSKEY0", date, region, service, end))
    key = ("AWS4" + ROOT_SK).encode()
    for part in (date, region, service, end):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    fields["policy"] = policy_b64
    fields["x-amz-signature"] = hmac.new(key, policy_b64.encode(), hashlib.sha256).hexdigest()
    return {"url": presigned["url"], "fields": fields}


def test_a_policy_nested_too_deep_for_the_json_parser_is_invalid(s3v4: Any, bucket: str) -> None:
    # a RecursionError in the decoder was a 500
    deep = base64.b64encode(b"[" * 5000 + b"]" * 5000).decode()
    r = post(resign(presign(s3v4, bucket, "deep"), deep), b"x")
    assert r.status_code == 400, r.text
    assert error(r)[0] == "InvalidPolicyDocument"
    with pytest.raises(ClientError):
        s3v4.head_object(Bucket=bucket, Key="deep")


def test_the_credential_date_must_be_the_date_of_x_amz_date(s3v4: Any, bucket: str) -> None:
    presigned = presign(s3v4, bucket, "dated")
    r = post(resign(presigned, presigned["fields"]["policy"], credential_date="20200101"), b"x")
    assert r.status_code == 400, r.text
    code, message, extra = error(r)
    assert code == "InvalidArgument" and "20200101" in message and extra["ArgumentName"] == "X-Amz-Date"
    with pytest.raises(ClientError):
        s3v4.head_object(Bucket=bucket, Key="dated")
    # the same form, signed with its own date, is accepted
    assert post(resign(presigned, presigned["fields"]["policy"]), b"x").status_code == 204


def test_a_redirect_with_a_fragment_gets_the_parameters_before_it(s3v4: Any, bucket: str) -> None:
    # browsers never send the fragment: parameters after '#' would not reach the page's server
    presigned = presign(s3v4, bucket, "frag", {"success_action_redirect": "https://app.example.test/done?x=1#section"})
    r = post(presigned, b"x")
    assert r.status_code == 303, r.text
    parts = urlsplit(r.headers["location"])
    assert parts.fragment == "section"
    assert parse_qs(parts.query) == {"x": ["1"], "bucket": [bucket], "key": ["frag"],
                                     "etag": [f'"{hashlib.md5(b"x").hexdigest()}"']}
