"""A GET that has begun finishes on the bytes it began with, as on S3, even when the object
is overwritten or deleted meanwhile (which, in an unversioned bucket, deletes its data at
once); and a GET or copy that looked up a version whose data went before its read began
looks again instead of failing."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import running_gateway, s3_client
from tests.support.procs import Service, wait_until

pytestmark = pytest.mark.integration
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("gw")) / "data"


@pytest.fixture(scope="module")
def gateway(data_dir: Path) -> Iterator[Service]:
    # two worker processes: the overwrite may well be served by the other one
    with running_gateway(data_dir, config="[gateway]\nworkers = 2\n") as svc:
        yield svc


@pytest.fixture(scope="module")
def s3(gateway: Service) -> Any:
    return s3_client(gateway.url)


def put_aside(data_dir: Path) -> list[str]:
    """Object directories a delete put aside and has not removed yet."""
    return [p.name for p in (data_dir / "sfs").glob("*/.cleanup-*")]


def errors(gateway: Service) -> list[str]:
    return [line for line in gateway.output if "ERROR" in line or "Traceback" in line]


def test_a_get_in_progress_outlives_an_overwrite(s3: Any, gateway: Service, data_dir: Path) -> None:
    s3.create_bucket(Bucket="overwrite")
    old, new = os.urandom(24 * MiB), os.urandom(24 * MiB)  # six 4 MiB chunks each
    s3.put_object(Bucket="overwrite", Key="k", Body=old)
    body = s3.get_object(Bucket="overwrite", Key="k")["Body"]
    head = body.read(64 * 1024)
    s3.put_object(Bucket="overwrite", Key="k", Body=new)
    assert s3.get_object(Bucket="overwrite", Key="k")["Body"].read() == new
    assert hashlib.sha256(head + body.read()).digest() == hashlib.sha256(old).digest()
    # the old data goes once the read that held it has ended
    wait_until(lambda: not put_aside(data_dir), timeout=30, what="the overwritten data removed")
    assert errors(gateway) == []


def test_a_get_of_a_multipart_object_outlives_a_delete(s3: Any, gateway: Service, data_dir: Path) -> None:
    s3.create_bucket(Bucket="mpdelete")
    parts = [os.urandom(5 * MiB) for _ in range(4)]
    upload = s3.create_multipart_upload(Bucket="mpdelete", Key="k")["UploadId"]
    etags = [
        s3.upload_part(Bucket="mpdelete", Key="k", UploadId=upload, PartNumber=n, Body=part)["ETag"]
        for n, part in enumerate(parts, 1)
    ]
    s3.complete_multipart_upload(
        Bucket="mpdelete", Key="k", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]},
    )
    body = s3.get_object(Bucket="mpdelete", Key="k")["Body"]
    head = body.read(64 * 1024)
    s3.delete_object(Bucket="mpdelete", Key="k")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="mpdelete", Key="k")
    assert head + body.read() == b"".join(parts)  # the later parts too, read after the delete
    wait_until(lambda: not put_aside(data_dir), timeout=30, what="the deleted parts removed")
    assert errors(gateway) == []


def test_gets_and_copies_racing_overwrites_never_fail(s3: Any, gateway: Service) -> None:
    """Each GET answers one of the versions written, whole; a copy copies one; none fails."""
    s3.create_bucket(Bucket="race")
    payloads = [bytes([n]) * (100 * 1024 + n) for n in range(8)]  # small: read whole at once
    s3.put_object(Bucket="race", Key="k", Body=payloads[0])
    stop = threading.Event()
    failures: list[BaseException] = []

    def overwrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            s3.put_object(Bucket="race", Key="k", Body=payloads[n % len(payloads)])

    def read(copy: bool) -> None:
        client = s3_client(gateway.url)
        try:
            for i in range(150):
                if copy:
                    client.copy_object(Bucket="race", Key=f"copy{i % 5}", CopySource={"Bucket": "race", "Key": "k"})
                    got = client.get_object(Bucket="race", Key=f"copy{i % 5}")["Body"].read()
                else:
                    got = client.get_object(Bucket="race", Key="k")["Body"].read()
                assert got in payloads
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    writer = threading.Thread(target=overwrite)
    readers = [threading.Thread(target=read, args=(n == 0,)) for n in range(3)]
    writer.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=300)
    stop.set()
    writer.join(timeout=60)
    assert failures == []
    assert errors(gateway) == []


def test_a_get_left_early_lets_the_deleted_data_go(s3: Any, gateway: Service, data_dir: Path) -> None:
    """A client that stops reading and hangs up ends the GET's pins: the data it held, deleted
    meanwhile, is removed then, not when the process ends."""
    s3.create_bucket(Bucket="leftearly")
    s3.put_object(Bucket="leftearly", Key="k", Body=os.urandom(24 * MiB))
    body = s3.get_object(Bucket="leftearly", Key="k")["Body"]
    body.read(64 * 1024)
    s3.delete_object(Bucket="leftearly", Key="k")
    assert put_aside(data_dir)  # held by the GET
    body.close()
    wait_until(lambda: not put_aside(data_dir), timeout=30, what="the deleted data removed")
    assert errors(gateway) == []
