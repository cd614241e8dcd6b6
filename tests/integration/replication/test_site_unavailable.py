"""An endpoint that does not answer holds the versions, it does not fail them.

`ReplicationProcessor.process_batch` against real gateways (no Spark, no broker): a site
or a source that is down for longer than the retry window leaves its versions PENDING,
and the batch returns, with every version COMPLETED, once the endpoint answers again;
past `unavailable_hold_s` they fail as before."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crossbeat.extensions.replication.errors import ReplicationError, http_error
from crossbeat.extensions.replication.gateway import _item_error
from crossbeat.extensions.replication.messages import ReplicationEntry, ReplicationOutcome
from crossbeat.extensions.replication.processor import ReplicationProcessor
from crossbeat.extensions.replication.settings import (
    Endpoint,
    ReplicationSettings,
    RetrySettings,
    SiteSettings,
)
from tests.integration.replication.conftest import free_port
from tests.support.gateway import ROOT_AK, ROOT_SK, USERS_TOML, s3_client
from tests.support.procs import Service, start_service, wait_until
from tests.support.replication import replication_rule as rule

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


HOLDING = "holding"  # in the processor's warning when it starts to hold


@dataclass
class Site:
    """A gateway on a fixed port, so that it can stop and come back where clients expect it."""

    data: Path
    port: int = field(default_factory=free_port)
    svc: Service | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Site:
        self.data.mkdir(parents=True, exist_ok=True)
        cfg = self.data.parent / f"{self.data.name}.toml"
        cfg.write_text(USERS_TOML)
        self.svc = start_service(
            ["gateway", "--data-dir", str(self.data), "--listen", f"127.0.0.1:{self.port}",
             "--config", str(cfg)],
            env={"CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK},
        )
        return self

    def stop(self) -> None:
        if self.svc is not None:
            self.svc.stop()
            self.svc = None


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[tuple[Site, Site]]:
    a, b = Site(tmp_path / "a").start(), Site(tmp_path / "b").start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def settings(a: Site, b: Site, *, site_type: str = "crossbeat", hold_s: float = 600) -> ReplicationSettings:
    # A retry window of well under a second: any outage the test makes outlasts it.
    return ReplicationSettings(
        access_key=ROOT_AK, secret_key=ROOT_SK,  # type: ignore[arg-type]
        source=Endpoint(endpoint=a.url),
        sites={"b": SiteSettings(endpoint=b.url, type=site_type)},  # type: ignore[arg-type]
        retry=RetrySettings(max_attempts=3, max_seconds=0.5, backoff_min_s=0.05, backoff_max_s=0.1),
        unavailable_hold_s=hold_s, unavailable_probe_max_s=0.2,
    )


def bucket_pair(a: Site, b: Site, name: str) -> tuple[Any, Any]:
    sa, sb = s3_client(a.url), s3_client(b.url)
    for client in (sa, sb):
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    sa.put_bucket_replication(Bucket=name, ReplicationConfiguration=rule(name))
    return sa, sb


def write_versions(sa: Any, bucket: str) -> list[ReplicationEntry]:
    """Small versions (two per key: order matters), one large (the streaming path), a
    delete marker; their entries in journal order."""
    for i in range(24):
        sa.put_object(Bucket=bucket, Key=f"k/{i % 12}", Body=f"version {i}".encode() * (i + 1))
    sa.put_object(Bucket=bucket, Key="large", Body=b"L" * (2 * 1024 * 1024 + 5))
    sa.delete_object(Bucket=bucket, Key="k/0")
    listed = sa.list_object_versions(Bucket=bucket)
    entries = [ReplicationEntry(seq=0, bucket=bucket, key=v["Key"], versionId=v["VersionId"],
                                isDeleteMarker="ETag" not in v, sites=("b",), ts="")
               for v in listed.get("Versions", []) + listed.get("DeleteMarkers", [])]
    return sorted(entries, key=lambda e: e.versionId)


def latest(client: Any, bucket: str) -> dict[str, Any]:
    """key → (ETag, or DM for a delete marker) of its latest version."""
    listed = client.list_object_versions(Bucket=bucket)
    out = {v["Key"]: v["ETag"] for v in listed.get("Versions", []) if v["IsLatest"]}
    out.update({m["Key"]: "DM" for m in listed.get("DeleteMarkers", []) if m["IsLatest"]})
    return out


def in_background(processor: ReplicationProcessor, entries: list[ReplicationEntry]) -> Future[list[ReplicationOutcome]]:
    done: Future[list[ReplicationOutcome]] = Future()

    def run() -> None:
        try:
            done.set_result(processor.process_batch(entries))
        except BaseException as exc:  # handed to the test thread
            done.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return done


def wait_holding(caplog: pytest.LogCaptureFixture, done: Future[list[ReplicationOutcome]]) -> None:
    wait_until(lambda: done.done() or any(HOLDING in r.getMessage() for r in caplog.records),
               timeout=60, what="the processor holding")
    assert not done.done(), done.result()  # returned: FAILED outcomes instead of holding


@pytest.mark.parametrize("site_type", ["crossbeat", "s3"])
def test_a_site_down_past_the_retry_window_holds_then_completes(
    sites: tuple[Site, Site], caplog: pytest.LogCaptureFixture, site_type: str,
) -> None:
    a, b = sites
    bucket = f"down-{site_type}"
    sa, sb = bucket_pair(a, b, bucket)
    entries = write_versions(sa, bucket)
    b.stop()
    caplog.set_level(logging.WARNING, logger="crossbeat.extensions.replication.processor")
    done = in_background(ReplicationProcessor(settings(a, b, site_type=site_type), "b"), entries)
    wait_holding(caplog, done)
    b.start()
    outcomes = done.result(timeout=120)
    assert sorted(o.versionId for o in outcomes) == sorted(e.versionId for e in entries)
    assert {o.status for o in outcomes} == {"COMPLETED"}, [o.error for o in outcomes]
    # in order per object: each key's latest version at b is the source's
    assert latest(sb, bucket) == latest(sa, bucket)
    assert any("answer again" in r.getMessage() for r in caplog.records)


def test_a_source_down_past_the_retry_window_holds_then_completes(
    sites: tuple[Site, Site], caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = sites
    sa, sb = bucket_pair(a, b, "source-down")
    entries = write_versions(sa, "source-down")
    a.stop()
    caplog.set_level(logging.WARNING, logger="crossbeat.extensions.replication.processor")
    done = in_background(ReplicationProcessor(settings(a, b), "b"), entries)
    wait_holding(caplog, done)
    a.start()
    outcomes = done.result(timeout=120)
    assert len(outcomes) == len(entries) and {o.status for o in outcomes} == {"COMPLETED"}
    assert latest(sb, "source-down") == latest(s3_client(a.url), "source-down")


@pytest.mark.parametrize("hold_s", [1.0, 0.0], ids=["bounded", "off"])
def test_past_the_hold_or_without_it_the_versions_fail(sites: tuple[Site, Site], hold_s: float) -> None:
    a, b = sites
    sa, _ = bucket_pair(a, b, f"hold-{int(hold_s)}")
    entries = write_versions(sa, f"hold-{int(hold_s)}")
    b.stop()
    outcomes = ReplicationProcessor(settings(a, b, hold_s=hold_s), "b").process_batch(entries)
    assert len(outcomes) == len(entries)
    assert {o.status for o in outcomes} == {"FAILED"}
    assert all("refused" in (o.error or "").lower() or "connect" in (o.error or "").lower()
               for o in outcomes), outcomes[0].error


def test_what_counts_as_unavailable() -> None:
    for status in (502, 503, 504, 507):
        assert http_error("x", status, "").unavailable
    for status in (500, 400, 403, 404, 409):
        assert not http_error("x", status, "").unavailable
    assert http_error("x", 500, "").retryable and not http_error("x", 404, "").retryable
    for code in ("ServiceUnavailable", "SlowDown", "InsufficientCapacity"):
        err = _item_error({"error": code}, "x")
        assert err is not None and err.unavailable and err.retryable
    internal = _item_error({"error": "InternalError"}, "x")
    assert internal is not None and internal.retryable and not internal.unavailable
    bad = _item_error({"error": "BadDigest"}, "x")
    assert bad is not None and not bad.retryable and not bad.unavailable
    assert ReplicationError("x", retryable=False, unavailable=True).retryable
