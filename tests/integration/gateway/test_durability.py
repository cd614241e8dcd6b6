"""Crash safety: kill -9 in the middle of concurrent PUTs, then check what survived."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from tests.support.gateway import running_gateway, s3_client, signed
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def body_for(key: str) -> bytes:
    seed = hashlib.sha256(key.encode()).digest()
    size = 1 + int.from_bytes(seed[:2], "big") % 300_000  # mixes tiny and multi-piece bodies
    return (seed * (size // 32 + 1))[:size]


def sfs_objects(data_dir: Path) -> tuple[set[str], set[str]]:
    """(object ids with a manifest, object dirs without one) in the default sfs repository."""
    complete, partial = set(), set()
    root = data_dir / "sfs"
    for shard in root.iterdir() if root.exists() else []:
        if not shard.is_dir() or len(shard.name) != 3:
            continue
        for obj in shard.iterdir():
            (complete if (obj / "manifest.json").exists() else partial).add(obj.name)
    return complete, partial


def test_kill_9_during_concurrent_puts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acked: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()
    with running_gateway(data_dir) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="crash")
        s3.put_bucket_versioning(Bucket="crash", VersioningConfiguration={"Status": "Enabled"})

        def writer(t: int) -> None:
            client = s3_client(gw.url)
            i = 0
            while not stop.is_set() and i < 10_000:
                key = f"t{t}/{i}"
                try:
                    vid = client.put_object(Bucket="crash", Key=key, Body=body_for(key))["VersionId"]
                except Exception:  # noqa: BLE001 - the server died under us: expected
                    return
                with lock:
                    acked[key] = vid
                i += 1

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(writer, t) for t in range(8)]
            wait_until(lambda: len(acked) >= 150, timeout=120, what="150 acknowledged PUTs")
            gw.kill()
            stop.set()
            for f in futures:
                f.result(timeout=60)
    assert len(acked) >= 150

    with running_gateway(data_dir) as gw:  # restart runs the cleanup pass
        s3 = s3_client(gw.url)
        for key, vid in acked.items():
            got = s3.get_object(Bucket="crash", Key=key, VersionId=vid)["Body"].read()
            assert got == body_for(key), key
        # every stored version (acknowledged or not) is whole, and no journal entry points at
        # missing data
        versions: list[dict[str, Any]] = []
        for page in s3.get_paginator("list_object_versions").paginate(Bucket="crash"):
            versions += page.get("Versions", [])
        for v in versions:
            assert s3.get_object(Bucket="crash", Key=v["Key"], VersionId=v["VersionId"])["Body"].read() == body_for(v["Key"])
        after, referenced = 0, set()
        while True:
            r = signed("GET", f"{gw.url}/_/crossbeat/journal?after={after}&limit=1000")
            lines = [json.loads(x) for x in r.text.splitlines() if x]
            if not lines:
                break
            for e in lines:
                if e["op"] == "put" and e["bucket"] == "crash" and e["key"]:
                    assert s3.head_object(Bucket="crash", Key=e["key"], VersionId=e["versionId"])
                    referenced |= {loc["dataKey"] for loc in e["value"]["location"]}
            after = lines[-1]["seq"]
        assert len(referenced) == len(versions)
        complete, partial = sfs_objects(data_dir)
        assert partial == set(), "half-written objects survived the cleanup pass"
        assert complete == referenced, "orphan or missing data after the cleanup pass"


def test_corrupt_chunk_is_a_clear_error_never_wrong_bytes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="rot")
        s3.put_object(Bucket="rot", Key="small", Body=b"precious bytes")
        complete, _ = sfs_objects(data_dir)
        (object_id,) = complete
        chunk = next((data_dir / "sfs").glob(f"*/{object_id}/chunks/*/{object_id}-0"))
        raw = bytearray(chunk.read_bytes())
        raw[3] ^= 0xFF
        chunk.write_bytes(bytes(raw))
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.get_object(Bucket="rot", Key="small")
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert object_id in exc.value.response["Error"]["Message"]

        big = os.urandom(9 * 1024 * 1024)  # three 4 MiB chunks
        s3.put_object(Bucket="rot", Key="big", Body=big)
        (big_id,) = sfs_objects(data_dir)[0] - {object_id}
        second = next((data_dir / "sfs").glob(f"*/{big_id}/chunks/*/{big_id}-1"))
        raw = bytearray(second.read_bytes())
        raw[100] ^= 0x01
        second.write_bytes(bytes(raw))
        try:
            got = s3.get_object(Bucket="rot", Key="big")["Body"].read()
        except Exception:  # noqa: BLE001 - a broken stream is the right outcome
            got = None
        assert got is None, "corrupt data must never be served"
        assert s3.get_object(Bucket="rot", Key="big", Range="bytes=0-99")["Body"].read() == big[:100]


def test_an_unusable_manifest_is_a_clear_error_without_a_traceback(tmp_path: Path) -> None:
    """A manifest the repository cannot read (a directory in its place, after a bad restore):
    500 InternalError and one log line naming the object, not a traceback."""
    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="odd")
        s3.put_object(Bucket="odd", Key="k", Body=b"bytes")
        (object_id,) = sfs_objects(data_dir)[0]
        manifest = next((data_dir / "sfs").glob(f"*/{object_id}/manifest.json"))
        manifest.unlink()
        manifest.mkdir()
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.get_object(Bucket="odd", Key="k")
        assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        wait_until(lambda: any("data error on GET /odd/k" in line and object_id in line
                               for line in gw.output), timeout=10, what="the error logged")
        assert not any("Traceback" in line for line in gw.output)
