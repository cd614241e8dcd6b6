"""Bucket lifecycle and CORS configurations, GetObjectAttributes and POST Object as operators
drive them with the real clients (aws cli, s3cmd, rclone, a browser's requests through httpx),
against one gateway whose lifecycle day lasts a second and whose pass runs every half second,
so that rules set by a client are seen to act. Waits poll with a bound."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.compat.gateway.test_clients import (
    MiB,
    client_env,
    rclone_command,
    run,
    s3cmd_command,
    tool,
)
from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import Service, wait_until

pytestmark = pytest.mark.compat
CONFIG = """
[gateway]
lifecycle_interval_seconds = 0.5
lifecycle_day_seconds = 1
"""
BOUND_S = 30.0
APP = "https://app.example.com"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("gw")) / "data", config=CONFIG) as svc:
        yield svc


def fails(args: list[str], env: dict[str, str]) -> str:
    """Run a client command that must fail; its stdout and stderr."""
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode != 0, f"{args[0]} succeeded: {r.stdout}"
    return r.stdout + r.stderr


@pytest.fixture
def aws(gateway: Service, tmp_path: Path) -> Callable[..., Any]:
    """`aws(*args)`: run the aws cli against the gateway; its JSON answer (the text of the
    high-level `aws s3` commands, None if empty).
    `aws(*args, fail=True)`: the output of a command that must fail."""
    exe = tool("aws")
    env = client_env(tmp_path)
    # multipart from 5 MiB, so that a small file makes several parts
    (tmp_path / "aws-config").write_text(
        "[default]\ns3 =\n  multipart_threshold = 5MB\n  multipart_chunksize = 5MB\n"
    )

    def call(*args: str, fail: bool = False) -> Any:
        full = [exe, *args, "--endpoint-url", gateway.url, "--output", "json"]
        if fail:
            return fails(full, env)
        out = run(full, env).stdout
        if not out.strip():
            return None
        return json.loads(out) if out.lstrip()[:1] in "{[" else out

    return call


# AWS's examples (S3 User Guide, "Examples of S3 Lifecycle configurations"; the aws cli
# reference), with the days short enough for the one-second days of this gateway to matter
AWS_LIFECYCLE = {"Rules": [
    {"ID": "ExpireOldLogs", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 365}},
    {"ID": "noncurrent", "Filter": {}, "Status": "Enabled",
     "NoncurrentVersionExpiration": {"NoncurrentDays": 30, "NewerNoncurrentVersions": 2}},
    {"ID": "abort", "Filter": {"Prefix": "uploads/"}, "Status": "Enabled",
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
    {"ID": "tax", "Status": "Enabled", "Expiration": {"Days": 3650},
     "Filter": {"And": {"Prefix": "tax/", "Tags": [{"Key": "key1", "Value": "value1"}, {"Key": "key2", "Value": "value2"}],
                        "ObjectSizeGreaterThan": 500, "ObjectSizeLessThan": 64000}}},
    {"ID": "large", "Filter": {"ObjectSizeGreaterThan": 500}, "Status": "Disabled", "Expiration": {"Days": 10}},
    {"ID": "markers", "Filter": {"Prefix": "x/"}, "Status": "Enabled", "Expiration": {"ExpiredObjectDeleteMarker": True}},
]}

AWS_CORS = {"CORSRules": [
    {"AllowedOrigins": ["http://www.example.com"], "AllowedHeaders": ["*"], "AllowedMethods": ["PUT", "POST", "DELETE"],
     "MaxAgeSeconds": 3000, "ExposeHeaders": ["x-amz-server-side-encryption"]},
    {"AllowedOrigins": ["*"], "AllowedHeaders": ["Authorization"], "AllowedMethods": ["GET"], "MaxAgeSeconds": 3000},
    {"AllowedOrigins": [APP], "AllowedHeaders": ["*"], "AllowedMethods": ["POST"], "ExposeHeaders": ["ETag", "Location"]},
]}


def test_aws_cli_lifecycle_round_trip_expiration_header_and_abort(aws: Callable[..., Any], tmp_path: Path) -> None:
    aws("s3", "mb", "s3://cli-lifecycle")
    (tmp_path / "lc.json").write_text(json.dumps(AWS_LIFECYCLE))
    aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", "cli-lifecycle",
        "--lifecycle-configuration", f"file://{tmp_path / 'lc.json'}")
    got = aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", "cli-lifecycle")
    assert got["Rules"] == AWS_LIFECYCLE["Rules"]

    # x-amz-expiration, which the cli shows as head-object's Expiration
    (tmp_path / "log.txt").write_text("log line")
    aws("s3", "cp", str(tmp_path / "log.txt"), "s3://cli-lifecycle/logs/1.txt")
    head = aws("s3api", "head-object", "--bucket", "cli-lifecycle", "--key", "logs/1.txt")
    m = re.fullmatch(r'expiry-date="([^"]+)", rule-id="ExpireOldLogs"', head["Expiration"])
    assert m, head["Expiration"]
    created = parsedate_to_datetime(head["LastModified"]).timestamp()
    # 365 one-second days after creation, rounded up to the next "midnight" (second)
    assert created + 365 <= parsedate_to_datetime(m.group(1)).timestamp() <= created + 366
    aws("s3", "cp", str(tmp_path / "log.txt"), "s3://cli-lifecycle/other.txt")
    assert "Expiration" not in aws("s3api", "head-object", "--bucket", "cli-lifecycle", "--key", "other.txt")

    # the abort rule acts: an upload under uploads/ goes, one elsewhere stays
    created = aws("s3api", "create-multipart-upload", "--bucket", "cli-lifecycle", "--key", "uploads/pending")
    assert created["AbortRuleId"] == "abort" and "AbortDate" in created  # x-amz-abort-*, parsed
    assert "AbortDate" not in aws("s3api", "create-multipart-upload", "--bucket", "cli-lifecycle",
                                  "--key", "kept/pending")

    def pending() -> list[str]:
        listing = aws("s3api", "list-multipart-uploads", "--bucket", "cli-lifecycle")
        return sorted(u["Key"] for u in (listing or {}).get("Uploads") or [])

    wait_until(lambda: pending() == ["kept/pending"], timeout=BOUND_S, interval=0.2, what="the abort rule aborts uploads/pending only")

    aws("s3api", "delete-bucket-lifecycle", "--bucket", "cli-lifecycle")
    out = aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", "cli-lifecycle", fail=True)
    assert "NoSuchLifecycleConfiguration" in out


def test_aws_cli_cors_then_a_browser_preflight_and_form_upload(
    aws: Callable[..., Any], gateway: Service, tmp_path: Path
) -> None:
    aws("s3", "mb", "s3://cli-cors")
    (tmp_path / "cors.json").write_text(json.dumps(AWS_CORS))
    aws("s3api", "put-bucket-cors", "--bucket", "cli-cors", "--cors-configuration", f"file://{tmp_path / 'cors.json'}")
    assert aws("s3api", "get-bucket-cors", "--bucket", "cli-cors") == AWS_CORS

    # what a page on APP does: fetch() of a FormData with a custom header is preflighted
    url = f"{gateway.url}/cli-cors"
    pre = httpx.options(url, headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                                      "Access-Control-Request-Headers": "x-requested-with"})
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] == APP
    assert pre.headers["access-control-allow-methods"] == "POST"
    assert pre.headers["access-control-allow-headers"] == "x-requested-with"
    form = s3_client(gateway.url).generate_presigned_post("cli-cors", "uploads/${filename}", ExpiresIn=600)
    r = httpx.post(form["url"], data=form["fields"], files={"file": ("photo.jpg", b"jpeg bytes", "image/jpeg")},
                   headers={"Origin": APP, "X-Requested-With": "fetch"})
    assert r.status_code == 204, r.text
    # the page can read the ETag only if the answer allows its origin and exposes it
    assert r.headers["access-control-allow-origin"] == APP
    assert "ETag" in [h.strip() for h in r.headers["access-control-expose-headers"].split(",")]
    assert r.headers["etag"] == aws("s3api", "head-object", "--bucket", "cli-cors", "--key", "uploads/photo.jpg")["ETag"]
    # any origin may GET, answered with * (and then no credentials)
    got = httpx.get(f"{url}/uploads/photo.jpg", headers={"Origin": "https://elsewhere.test"})
    assert got.status_code == 403  # not public: CORS headers do not grant access ...
    assert got.headers["access-control-allow-origin"] == "*"  # ... but the page may read the error
    assert "access-control-allow-credentials" not in got.headers
    denied = httpx.options(url, headers={"Origin": "https://elsewhere.test", "Access-Control-Request-Method": "POST"})
    assert denied.status_code == 403

    aws("s3api", "delete-bucket-cors", "--bucket", "cli-cors")
    assert "NoSuchCORSConfiguration" in aws("s3api", "get-bucket-cors", "--bucket", "cli-cors", fail=True)

    def preflight_refused() -> bool:
        # another gateway process may serve its cached rules for up to a second
        gone = httpx.options(url, headers={"Origin": APP, "Access-Control-Request-Method": "POST"})
        return gone.status_code == 403 and "CORS is not enabled" in gone.text

    wait_until(preflight_refused, timeout=10, what="preflights refused once the rules are deleted")


def test_aws_cli_object_attributes_of_a_multipart_copy(aws: Callable[..., Any], tmp_path: Path) -> None:
    aws("s3", "mb", "s3://cli-attributes")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(11 * MiB))  # three parts of 5, 5 and 1 MiB
    aws("s3", "cp", str(big), "s3://cli-attributes/big.bin")
    head = aws("s3api", "head-object", "--bucket", "cli-attributes", "--key", "big.bin")
    got = aws("s3api", "get-object-attributes", "--bucket", "cli-attributes", "--key", "big.bin",
              "--object-attributes", "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
    assert got["ETag"] == head["ETag"].strip('"') and got["ETag"].endswith("-3")
    assert got["ObjectSize"] == 11 * MiB and got["StorageClass"] == "STANDARD"
    # the cli uploads with CRC32 checksums (botocore's default): S3 then lists the parts
    [(algorithm, _value)] = [(k, v) for k, v in got["Checksum"].items() if k != "ChecksumType"]
    parts = got["ObjectParts"]
    assert parts["TotalPartsCount"] == 3 and parts["IsTruncated"] is False
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, 5 * MiB), (2, 5 * MiB), (3, MiB)]
    assert all(algorithm in p for p in parts["Parts"])
    page = aws("s3api", "get-object-attributes", "--bucket", "cli-attributes", "--key", "big.bin",
               "--object-attributes", "ObjectParts", "--max-parts", "1", "--part-number-marker", "1")["ObjectParts"]
    assert [p["PartNumber"] for p in page["Parts"]] == [2]
    assert page["IsTruncated"] is True and page["NextPartNumberMarker"] == 2 and page["MaxParts"] == 1


AWS_LIFECYCLE_XML = """<LifecycleConfiguration>
  <Rule>
    <ID>example-id</ID>
    <Filter>
      <And>
        <Prefix>projectA/</Prefix>
        <Tag><Key>key1</Key><Value>value1</Value></Tag>
        <ObjectSizeGreaterThan>500</ObjectSizeGreaterThan>
      </And>
    </Filter>
    <Status>Enabled</Status>
    <Expiration><Days>365</Days></Expiration>
  </Rule>
  <Rule>
    <ID>abort</ID>
    <Filter/>
    <Status>Enabled</Status>
    <AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload>
  </Rule>
</LifecycleConfiguration>
"""

AWS_CORS_XML = """<?xml version="1.0" encoding="UTF-8"?>
<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <CORSRule>
    <AllowedOrigin>http://www.example.com</AllowedOrigin>
    <AllowedMethod>PUT</AllowedMethod>
    <AllowedMethod>POST</AllowedMethod>
    <AllowedHeader>*</AllowedHeader>
    <MaxAgeSeconds>3000</MaxAgeSeconds>
    <ExposeHeader>ETag</ExposeHeader>
  </CORSRule>
</CORSConfiguration>
"""


def test_s3cmd_lifecycle_expire_cors_and_info(gateway: Service, tmp_path: Path) -> None:
    env = client_env(tmp_path)
    base = s3cmd_command(gateway, tmp_path)
    bucket = "s3://s3cmd-configs"
    run([*base, "mb", bucket], env)
    info = run([*base, "info", bucket], env).stdout  # reads location, versioning, lifecycle, policy, cors, acl…
    assert "Expiration rule: none" in info and "CORS:      none" in info

    (tmp_path / "lc.xml").write_text(AWS_LIFECYCLE_XML)
    run([*base, "setlifecycle", str(tmp_path / "lc.xml"), bucket], env)
    assert "<ID>example-id</ID>" in run([*base, "getlifecycle", bucket], env).stdout
    assert "objects with key prefix 'projectA/' will expire in '365' day(s)" in run([*base, "info", bucket], env).stdout

    # `expire` replaces the configuration with a rule of its own making; it acts
    small = tmp_path / "small.txt"
    small.write_text("small")
    for key in ("tmp/a", "tmp/b", "keep/c"):
        run([*base, "put", str(small), f"{bucket}/{key}"], env)
    run([*base, "expire", bucket, "--expiry-days=1", "--expiry-prefix=tmp/"], env)
    assert "will expire in '1' day(s)" in run([*base, "info", bucket], env).stdout

    def listed() -> list[str]:
        return sorted(line.split()[-1] for line in run([*base, "ls", "-r", bucket], env).stdout.splitlines())

    wait_until(lambda: listed() == [f"{bucket}/keep/c"], timeout=BOUND_S, interval=0.2, what="s3cmd's expire rule removes tmp/ only")
    # and the date form, which s3cmd sends as given
    run([*base, "expire", bucket, "--expiry-date=2030-01-01T00:00:00.000Z", "--expiry-prefix=old/"], env)
    assert "<Date>2030-01-01T00:00:00.000Z</Date>" in run([*base, "getlifecycle", bucket], env).stdout

    run([*base, "dellifecycle", bucket], env)
    assert "NoSuchLifecycleConfiguration" in fails([*base, "getlifecycle", bucket], env)

    (tmp_path / "cors.xml").write_text(AWS_CORS_XML)
    run([*base, "setcors", str(tmp_path / "cors.xml"), bucket], env)
    info = run([*base, "info", bucket], env).stdout
    assert "<AllowedOrigin>http://www.example.com</AllowedOrigin>" in info and "Expiration rule: none" in info
    run([*base, "delcors", bucket], env)
    assert "CORS:      none" in run([*base, "info", bucket], env).stdout

    # s3cmd's multipart uploads carry no checksum: S3 gives their part count alone
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * MiB))
    run([*base, "put", "--multipart-chunk-size-mb=5", str(big), f"{bucket}/big.bin"], env)
    got = s3_client(gateway.url).get_object_attributes(Bucket="s3cmd-configs", Key="big.bin",
                                                       ObjectAttributes=["ObjectParts", "ObjectSize"])
    assert got["ObjectParts"] == {"TotalPartsCount": 2} and got["ObjectSize"] == 6 * MiB


def test_rclone_with_lifecycle_and_cors_and_cleanup(gateway: Service, tmp_path: Path) -> None:
    env = client_env(tmp_path)
    base = rclone_command(gateway, tmp_path)
    s3 = s3_client(gateway.url)
    s3.create_bucket(Bucket="rclone-configs")
    s3.put_bucket_lifecycle_configuration(Bucket="rclone-configs", LifecycleConfiguration={"Rules": [
        {"ID": "later", "Filter": {"Prefix": "data/"}, "Status": "Enabled", "Expiration": {"Days": 3600}}]})
    s3.put_bucket_cors(Bucket="rclone-configs", CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}]})

    src = tmp_path / "src"
    src.mkdir()
    files = {f"r{i}.bin": os.urandom(1000 + i) for i in range(4)}
    files["large.bin"] = os.urandom(6 * MiB)
    for name, data in files.items():
        (src / name).write_bytes(data)
    chunks = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"]
    run([*base, "sync", str(src), "cb:rclone-configs/data", *chunks], env)
    run([*base, "check", str(src), "cb:rclone-configs/data"], env)
    (src / "r0.bin").unlink()
    run([*base, "sync", str(src), "cb:rclone-configs/data", *chunks], env)
    assert sorted(run([*base, "lsf", "cb:rclone-configs/data"], env).stdout.split()) == sorted(set(files) - {"r0.bin"})

    # `rclone backend cleanup` aborts the pending multipart uploads older than max-age
    s3.create_multipart_upload(Bucket="rclone-configs", Key="data/abandoned")
    listed = json.loads(run([*base, "backend", "list-multipart-uploads", "cb:rclone-configs"], env).stdout)
    assert [u["Key"] for u in listed["rclone-configs"]] == ["data/abandoned"]
    run([*base, "backend", "cleanup", "cb:rclone-configs", "-o", "max-age=0s"], env)
    assert not s3.list_multipart_uploads(Bucket="rclone-configs").get("Uploads")
    # the configurations are untouched by all this
    assert s3.get_bucket_lifecycle_configuration(Bucket="rclone-configs")["Rules"][0]["ID"] == "later"
    assert s3.get_bucket_cors(Bucket="rclone-configs")["CORSRules"][0]["AllowedOrigins"] == ["*"]
