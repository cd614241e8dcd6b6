"""`crossbeat replication failed | retry` against a real gateway, as an operator meets it:
credentials named when missing, the gateway's refusals as one line (never its XML), bad
flags refused before anything is sent, and a retry that requeued nothing says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client, signed
from tests.support.procs import Service

BASE_ENV = {k: v for k, v in os.environ.items()
            if not k.startswith(("CROSSBEAT_", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))}
ROOT_ENV = {**BASE_ENV, "CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(tmp_path_factory.mktemp("cli-replication") / "gw") as svc:
        yield svc


@pytest.fixture(scope="module")
def versions(gateway: Service) -> dict[str, str]:
    """A bucket replicated to site b: versions `pending` (as written) and `failed1`,
    `failed2` (set FAILED as the status pipeline does)."""
    s3 = s3_client(gateway.url)
    s3.create_bucket(Bucket="src")
    s3.put_bucket_versioning(Bucket="src", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_replication(Bucket="src", ReplicationConfiguration={
        "Role": "arn:aws:iam::000000000000:role/r", "Rules": [{
            "ID": "r1", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
            "DeleteMarkerReplication": {"Status": "Disabled"},
            "Destination": {"Bucket": "arn:aws:s3:::src", "StorageClass": "b"}}]})
    out = {name: s3.put_object(Bucket="src", Key=name, Body=b"x")["VersionId"]
           for name in ("pending", "failed1", "failed2")}
    for name in ("failed1", "failed2"):
        url = f"{gateway.url}/_/crossbeat/metadata/src/{name}?versionId={out[name]}"
        meta = signed("GET", url).json()
        failed = dict(meta, replicationInfo=dict(
            meta["replicationInfo"], status="FAILED",
            backends=[{"site": "b", "status": "FAILED", "dataStoreVersionId": ""}]))
        r = signed("PUT", url, json.dumps({"metadata": failed, "expectedRevision": meta["revision"]}).encode())
        assert r.status_code == 200, r.text
    return out


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crossbeat", "replication", *args],
                          env=ROOT_ENV if env is None else env, capture_output=True, text=True,
                          timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "<Error>" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_missing_credentials_are_named(gateway: Service) -> None:
    """The CLI sent an empty access key and printed the gateway's XML; `up`'s banner
    exports AWS_*, which the CLI does not read: the error says how to use them."""
    result = cli("--gateway", gateway.url, "failed", env=BASE_ENV)
    assert_one_line_error(result, 1, "CROSSBEAT_ACCESS_KEY and CROSSBEAT_SECRET_KEY")
    env = {**BASE_ENV, "AWS_ACCESS_KEY_ID": ROOT_AK, "AWS_SECRET_ACCESS_KEY": ROOT_SK}
    result = cli("--gateway", gateway.url, "retry", "--all", env=env)
    assert_one_line_error(result, 1, "CROSSBEAT_ACCESS_KEY", "export CROSSBEAT_ACCESS_KEY=$AWS_ACCESS_KEY_ID")


def test_a_refusal_is_one_line_with_its_code(gateway: Service) -> None:
    result = cli("--gateway", gateway.url, "failed", env={**ROOT_ENV, "CROSSBEAT_SECRET_KEY": "wrong"})
    assert_one_line_error(result, 1, "SignatureDoesNotMatch: ", "(HTTP 403)", "CROSSBEAT_SECRET_KEY")
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8000", "http://127.0.0.1:port"])
def test_the_gateway_must_be_a_url(url: str) -> None:
    """`--gateway notaurl` ended in an AttributeError from request signing."""
    assert_one_line_error(cli("--gateway", url, "failed"), 2, "Invalid value for '--gateway'",
                          "http(s)://HOST[:PORT]")


def test_limit_is_from_1_to_10000(gateway: Service, versions: dict[str, str]) -> None:
    """-5 went to the gateway (its XML came back) and 0 listed a version anyway."""
    for bad in ("-5", "0", "10001"):
        assert_one_line_error(cli("--gateway", gateway.url, "failed", "--limit", bad), 2,
                              "Invalid value for '--limit'")
    every = cli("--gateway", gateway.url, "failed")
    assert every.returncode == 0, every.stderr
    assert sorted(every.stdout.splitlines()) == [
        f"src\t{name}\t{versions[name]}\tb" for name in ("failed1", "failed2")]
    assert every.stderr == "2 failed version(s)\n"
    one = cli("--gateway", gateway.url, "failed", "--limit", "1")
    assert one.returncode == 0, one.stderr
    assert len(one.stdout.splitlines()) == 1 and "there may be more" in one.stderr


def test_a_retry_that_requeues_nothing_says_why(gateway: Service, versions: dict[str, str]) -> None:
    """It printed "requeued 0 version(s)" with exit status 0, whatever the reason."""
    missing = cli("--gateway", gateway.url, "retry", "src", "pending", "0" * 26)
    assert_one_line_error(missing, 1, f"no version {'0' * 26} of src/pending")
    no_bucket = cli("--gateway", gateway.url, "retry", "nosuchbucket", "k", versions["pending"])
    assert_one_line_error(no_bucket, 1, "of nosuchbucket/k")
    pending = cli("--gateway", gateway.url, "retry", "src", "pending", versions["pending"])
    assert pending.returncode == 0, pending.stderr
    assert pending.stdout == ("requeued 0 version(s): its replication status is PENDING (b PENDING);"
                              " only FAILED sites are requeued\n")
    requeued = cli("--gateway", gateway.url, "retry", "src", "failed2", versions["failed2"])
    assert (requeued.returncode, requeued.stdout) == (0, "requeued 1 version(s)\n"), requeued.stderr
    s3: Any = s3_client(gateway.url)
    assert s3.head_object(Bucket="src", Key="failed2")["ReplicationStatus"] == "PENDING"
