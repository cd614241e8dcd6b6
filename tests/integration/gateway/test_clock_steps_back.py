"""A gateway whose clock stepped back (NTP, a restored VM) after versions were written: a new
version, null version or delete marker still becomes the latest, as on S3, where the last
write wins. Version ids come from the clock; the order of a key's versions may not.

The gateway runs under libfaketime (the Debian `faketime` package `make test` installs),
ten minutes behind: within SigV4's fifteen minutes of skew."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import Service

pytestmark = pytest.mark.integration
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
BEHIND = {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "-600", "DONT_FAKE_MONOTONIC": "1"}
CONFIG = "[gateway]\nworkers = 2\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not LIBFAKETIME.exists():
        pytest.skip("libfaketime is not installed (make install adds the faketime package)")
    return Path(tmp_path_factory.mktemp("gw")) / "data"


@pytest.fixture(scope="module")
def written(data_dir: Path) -> dict[str, str]:
    """Versions written at the right time; returns the version ids."""
    with running_gateway(data_dir, config=CONFIG) as svc:
        s3 = s3_client(svc.url)
        for bucket in ("versioned", "suspended", "marked"):
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        ids = {b: s3.put_object(Bucket=b, Key="k", Body=b"before")["VersionId"]
               for b in ("versioned", "suspended", "marked")}
        s3.put_bucket_versioning(Bucket="suspended", VersioningConfiguration={"Status": "Suspended"})
    return ids


@pytest.fixture(scope="module")
def behind(data_dir: Path, written: dict[str, str]) -> Iterator[Service]:
    with running_gateway(data_dir, config=CONFIG, env=BEHIND) as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(behind: Service) -> Any:
    return s3_client(behind.url)


def test_the_gateway_clock_is_behind(s3: Any, written: dict[str, str]) -> None:
    s3.put_object(Bucket="versioned", Key="probe", Body=b"x")
    head = s3.head_object(Bucket="versioned", Key="probe")
    before = s3.head_object(Bucket="versioned", Key="k")
    assert head["LastModified"] < before["LastModified"]  # the premise of the tests below


def test_a_new_version_is_the_latest(s3: Any, written: dict[str, str]) -> None:
    new_id = s3.put_object(Bucket="versioned", Key="k", Body=b"after")["VersionId"]
    assert s3.get_object(Bucket="versioned", Key="k")["Body"].read() == b"after"
    versions = s3.list_object_versions(Bucket="versioned", Prefix="k")["Versions"]
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(new_id, True), (written["versioned"], False)]
    # each version is still read by its id
    assert s3.get_object(Bucket="versioned", Key="k", VersionId=written["versioned"])["Body"].read() == b"before"


def test_a_null_version_in_a_suspended_bucket_is_the_latest(s3: Any, written: dict[str, str]) -> None:
    s3.put_object(Bucket="suspended", Key="k", Body=b"null version")
    assert s3.get_object(Bucket="suspended", Key="k")["Body"].read() == b"null version"
    s3.put_object(Bucket="suspended", Key="k", Body=b"null again")  # replaces the null version
    assert s3.get_object(Bucket="suspended", Key="k")["Body"].read() == b"null again"


def test_a_delete_marker_is_the_latest(s3: Any, written: dict[str, str]) -> None:
    s3.delete_object(Bucket="marked", Key="k")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="marked", Key="k")
    versions = s3.list_object_versions(Bucket="marked", Prefix="k")
    assert [m["IsLatest"] for m in versions["DeleteMarkers"]] == [True]
