"""A full disk: a write that finds no space is 507 InsufficientCapacity (Ceph RGW's answer)
with no traceback, and leaves nothing behind; every acknowledged object reads back whole;
once space is freed, writes succeed again.

The gateway's data dir is a 16 MiB tmpfs of its own (`tests.support.smallfs`)."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.gateway import running_gateway, s3_client, signed
from tests.support.procs import Service, wait_until
from tests.support.smallfs import fill, small_filesystem

pytestmark = pytest.mark.integration
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def small_fs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with small_filesystem(tmp_path_factory.mktemp("smallfs"), 16) as mnt:
        yield mnt


@pytest.fixture(scope="module")
def gateway(small_fs: Path) -> Iterator[Service]:
    with running_gateway(small_fs / "data", config="[gateway]\nworkers = 1\n") as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    return s3_client(gateway.url)


def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(Exception) as info:  # noqa: PT011 - botocore's ClientError, checked below
        call()
    response: dict[str, Any] = info.value.response  # type: ignore[attr-defined]
    return response


def test_writes_to_a_full_disk_are_refused_and_change_nothing(
    s3: Any, gateway: Service, small_fs: Path
) -> None:
    s3.create_bucket(Bucket="full")
    acked: dict[str, bytes] = {}
    failure: dict[str, Any] | None = None
    for n in range(40):  # 40 MiB cannot fit in 16
        body = os.urandom(MiB)
        try:
            s3.put_object(Bucket="full", Key=f"big{n}", Body=body)
        except s3.exceptions.ClientError as exc:
            failure = exc.response
            break
        acked[f"big{n}"] = body
    assert failure is not None and len(acked) >= 3
    assert failure["ResponseMetadata"]["HTTPStatusCode"] == 507
    assert failure["Error"]["Code"] == "InsufficientCapacity"
    assert "full" in failure["Error"]["Message"]

    upload = s3.create_multipart_upload(Bucket="full", Key="mp")["UploadId"]
    filler = small_fs / "filler"
    fill(filler)  # not a byte left: small objects and parts are refused too
    small = refused(lambda: s3.put_object(Bucket="full", Key="small", Body=os.urandom(4096)))
    assert small["Error"]["Code"] == "InsufficientCapacity"
    part = refused(lambda: s3.upload_part(Bucket="full", Key="mp", UploadId=upload, PartNumber=1, Body=os.urandom(MiB)))
    assert part["Error"]["Code"] == "InsufficientCapacity"
    assert s3.list_parts(Bucket="full", Key="mp", UploadId=upload).get("Parts", []) == []

    # what was acknowledged is there, whole, and nothing else
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket="full").get("Contents", [])}
    assert listed == set(acked)
    for key, body in acked.items():
        assert s3.get_object(Bucket="full", Key=key)["Body"].read() == body
    assert [line for line in gateway.output if "Traceback" in line or "ERROR" in line] == []
    wait_until(lambda: any("InsufficientCapacity on PUT /full/" in line for line in gateway.output), timeout=10, what="the refusal logged")

    # space freed: writes work again
    filler.unlink()
    for key in list(acked)[:2]:
        s3.delete_object(Bucket="full", Key=key)
    again = os.urandom(MiB)
    s3.put_object(Bucket="full", Key="again", Body=again)
    assert s3.get_object(Bucket="full", Key="again")["Body"].read() == again


def test_a_gateway_starts_on_a_full_disk_after_a_crash_and_says_why_it_cannot_after_a_stop(
    tmp_path: Path,
) -> None:
    """Opening the metadata database writes nothing when its schema is current, so a gateway
    killed on a full disk starts again and serves reads (writes are 507). After a clean stop
    SQLite has removed its -wal and -shm files and cannot make them on a full disk: the
    gateway exits with one line saying so, not a traceback."""
    (tmp_path / "mnt").mkdir()
    config = "[gateway]\nworkers = 1\n"
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        data_dir, filler = mnt / "data", mnt / "filler"
        body = os.urandom(100 * 1024)
        with running_gateway(data_dir, config=config) as svc:
            s3 = s3_client(svc.url)
            s3.create_bucket(Bucket="crash")
            s3.put_object(Bucket="crash", Key="k", Body=body)
        fill(filler)  # after a clean stop
        with pytest.raises(RuntimeError) as failed, running_gateway(data_dir, config=config):
            pass
        assert "cannot open the metadata database" in str(failed.value)
        assert "no space left" in str(failed.value)
        assert "Traceback" not in str(failed.value)
        filler.unlink()
        with running_gateway(data_dir, config=config) as svc:
            assert s3_client(svc.url).get_object(Bucket="crash", Key="k")["Body"].read() == body
            svc.kill()
        fill(filler)  # after a crash
        with running_gateway(data_dir, config=config) as svc:
            s3 = s3_client(svc.url)
            assert s3.get_object(Bucket="crash", Key="k")["Body"].read() == body
            put = refused(lambda: s3.put_object(Bucket="crash", Key="new", Body=b"x"))
            assert put["Error"]["Code"] == "InsufficientCapacity"


def data_objects(data_dir: Path) -> set[str]:
    return {p.parent.name for p in (data_dir / "sfs").glob("*/*/manifest.json")}


def test_a_write_whose_metadata_finds_no_room_frees_its_data(tmp_path: Path) -> None:
    """With a little room left, a part's or replica's data may fit where its metadata commit
    (SQLITE_FULL) does not: the request is refused, and the data written is freed at once
    (it was left for the next start's cleanup pass). Swept over how much room is left, so
    that both the data write and the metadata commit are where it runs out."""
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        data_dir = mnt / "data"
        with running_gateway(data_dir, config="[gateway]\nworkers = 1\nmin_part_bytes = 0\n") as svc:
            s3 = s3_client(svc.url)
            s3.create_bucket(Bucket="parts")
            s3.create_bucket(Bucket="dst")
            body = os.urandom(3000)
            s3.put_object(Bucket="parts", Key="src", Body=body)
            upload = s3.create_multipart_upload(Bucket="parts", Key="mp")["UploadId"]
            meta = signed("GET", f"{svc.url}/_/crossbeat/metadata/parts/src").json()
            meta = dict(meta.get("metadata", meta), bucket="dst")
            replica = orjson.dumps({"replicas": [{"metadata": meta, "data": base64.b64encode(body).decode()}]})
            writes = {
                "part": lambda: s3.upload_part(Bucket="parts", Key="mp", UploadId=upload, PartNumber=1, Body=body),
                "part copy": lambda: s3.upload_part_copy(
                    Bucket="parts", Key="mp", UploadId=upload, PartNumber=2, CopySource="parts/src"
                ),
                "replica": lambda: _replicate(svc.url, replica),
            }
            refusals = 0
            for leave in range(0, 48 * 1024, 2048):
                for name, write in writes.items():
                    before = data_objects(data_dir)
                    fill(mnt / "filler", leave=leave)
                    try:
                        write()
                        refused_now = False
                    except Exception:  # noqa: BLE001 - botocore's ClientError or ours
                        refused_now = True
                    after = data_objects(data_dir)
                    (mnt / "filler").unlink()
                    if refused_now:
                        refusals += 1
                        assert after <= before, f"{name} refused with {leave} bytes left kept its data"
            assert refusals > 0
            assert [line for line in svc.output if "Traceback" in line or "ERROR" in line] == []


def _replicate(url: str, body: bytes) -> None:
    """POST a batchReplica; raises unless every replica was stored."""
    answer = signed("POST", f"{url}/_/crossbeat/batchReplica", body)
    if answer.status_code != 200 or b'"error"' in answer.content:
        raise RuntimeError(f"batchReplica: {answer.status_code} {answer.text[:200]}")


def test_the_lifecycle_pass_on_a_full_disk_waits_its_interval(tmp_path: Path) -> None:
    """A lifecycle pass that cannot record its start (a full disk) is tried again after its
    interval, logged as one warning line: it was retried every second, each time with a
    traceback, and left its temporary state file behind."""
    (tmp_path / "mnt").mkdir()
    interval = 3
    with small_filesystem(tmp_path / "mnt", 16) as mnt:
        data_dir = mnt / "data"
        config = f"[gateway]\nworkers = 1\nlifecycle_interval_seconds = {interval}\n"
        with running_gateway(data_dir, config=config) as svc:
            wait_until(lambda: (data_dir / "lifecycle-state.json").exists(), timeout=30,
                       what="the first lifecycle pass")
            fill(mnt / "filler")

            def failures() -> list[datetime]:
                return [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in svc.output
                        if "lifecycle pass failed" in line]

            wait_until(lambda: len(failures()) >= 2, timeout=30, what="two failed lifecycle passes")
            first, second = failures()[:2]
            assert (second - first).total_seconds() >= interval * 0.9
            assert not (data_dir / "lifecycle-state.tmp").exists()
            assert [line for line in svc.output if "Traceback" in line] == []
