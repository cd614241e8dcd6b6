"""The internal `/_/crossbeat/` routes used by the populator and the replication engine.

All need admin credentials (checked by the router). Bodies and answers are JSON.
- GET  journal?after=SEQ&limit=N[&wait=S]       → NDJSON entries (long-poll), 410 if truncated
- POST journal/checkpoint?consumer=C&seq=N      → 204
- GET  metadata/{bucket}/{key}?versionId=V       → object metadata (with revision, sortKey)
- GET  object/{bucket}/{key}?versionId=V         → the version's bytes, as a GetObject answers
                                                   them (Range too), whoever owns the bucket:
                                                   the replication engine's source read (admin
                                                   credentials own no user's bucket)
- PUT  metadata/{bucket}/{key}?versionId=V       → {"metadata", "expectedRevision"} CAS, or
                                                   {"metadata", "create": true} (replica insert)
- PUT  data/{bucket}/{key}[?md5=0][&owner=O]      → store bytes, {"location": [...], "md5"}
                                                   (md5=0: no MD5 is computed, "md5" is "";
                                                   x-amz-checksum-* headers still verify);
                                                   the data of a replica-to-be: refused, before
                                                   a byte is stored, where its version could
                                                   not be created (O: the source's owner)
- PUT  replica/{bucket}/{key}?versionId=V         → bytes + metadata (header
                                                   x-amz-crossbeat-metadata: base64url JSON) in
                                                   one request: data written, checked against
                                                   size/ETag, then the version created
- POST batchDelete                                → {"locations": [...]} deleted (idempotent)
- POST batchRead | batchReplica | batchUpdate      → many versions per request (internal_batch)
- GET  replication/failed?limit=&marker=          → versions whose replication FAILED
- POST replication/retry                          → {"all": true} | {"bucket","key","versionId"}

A replica (metadata create, replica, batchReplica; data for one) is created only in a bucket whose
versioning is Enabled, as S3 requires of a replication destination; otherwise the answer is
NoSuchBucket (DstBucketNotFound) or 409 InvalidBucketState (DstBucketUnversioned), and
nothing changes (`version_check.replica_bucket_error`).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any

import orjson

from crossbeat.metadata.errors import (
    JournalAhead,
    JournalTruncated,
    NoSuchVersion,
    RevisionMismatch,
)
from crossbeat.s3 import objects
from crossbeat.s3.auth import Principal
from crossbeat.s3.datapath import Written, read_document, write_body
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, client_gone
from crossbeat.s3.internal_batch import batch_read, batch_replica, batch_update, unreferenced
from crossbeat.s3.replication import global_status
from crossbeat.s3.version_check import (
    as_replica,
    check_version,
    is_location_list,
    replica_bucket_error,
    store_replicas,
)

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

MAX_WAIT = 30.0
BATCH_ROUTES = {"batchRead": batch_read, "batchReplica": batch_replica, "batchUpdate": batch_update}
# every internal route: an unknown one is 404, a known one asked with the wrong method 405
_ROUTES = frozenset({
    ("journal", ""), ("journal", "checkpoint"), ("batchDelete", ""), ("replication", "failed"),
    ("replication", "retry"), *((name, "") for name in BATCH_ROUTES),
})
_OBJECT_ROUTES = frozenset({"metadata", "data", "replica", "object"})  # followed by bucket/key


async def get_object_bytes(gw: Gateway, req: Request, bucket: str, key: str) -> Response:
    """GetObject of `bucket`/`key` without the owner check: the router let only admin
    credentials in. A plain GET with them is AccessDenied in every user's bucket, so the
    replication of a large version (its bytes are read this way) failed for all but the
    admin's own buckets."""
    if not key:
        raise S3Error("InvalidArgument", "object/{bucket}/{key} needs a key")
    if await gw.run(gw.store.get_bucket, bucket) is None:
        raise S3Error("NoSuchBucket", resource=f"/{bucket}", extra={"BucketName": bucket})
    return await objects.read_object(gw, dataclasses.replace(req, bucket=bucket, key=key))


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(status=status, headers={"content-type": "application/json"}, body=orjson.dumps(doc))


MAX_SEQ = 2**63 - 1  # journal seqs are SQLite integers


def _int(q: dict[str, str], name: str, default: int, low: int = 0, high: int = MAX_SEQ) -> int:
    """Query parameter `name`: decimal digits only, from `low` to `high` (InvalidArgument)."""
    raw = q.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise S3Error("InvalidArgument", f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return int(raw)


def _seconds(q: dict[str, str], name: str) -> float:
    """Query parameter `name` in seconds (digits with an optional fraction), 0 if absent."""
    raw = q.get(name) or "0"
    whole, _, fraction = raw.partition(".")
    if not (whole.isascii() and whole.isdigit() and (not fraction or (fraction.isascii() and fraction.isdigit()))):
        raise S3Error("InvalidArgument", f"{name} must be a number of seconds, got {raw!r}")
    return float(raw)


async def dispatch(gw: Gateway, req: Request, p: Principal, ctx: Any, route: str) -> Response:
    head, _, rest = route.partition("/")
    m = req.method
    if (head, rest) not in _ROUTES and not (head in _OBJECT_ROUTES and rest):
        return json_response({"error": "NoSuchRoute", "route": route}, status=404)
    if head == "journal" and not rest and m == "GET":
        return await journal(gw, req)
    if head == "journal" and rest == "checkpoint" and m == "POST":
        await read_document(req, ctx)
        # a consumer must name itself: a stray call must not move another's retention mark
        consumer = req.query.get("consumer", "")
        if not consumer.strip():
            raise S3Error("InvalidArgument", "consumer (this reader's name) is required")
        seq = _int(req.query, "seq", -1)
        if seq < 0:
            raise S3Error("InvalidArgument", "seq (the last seq this consumer has handled) is required")
        await gw.run(gw.store.set_checkpoint, consumer, seq)
        return Response(status=204)
    if head == "metadata" and rest:
        bucket, _, key = rest.partition("/")
        if m == "GET":
            return await get_metadata(gw, req, bucket, key)
        if m == "PUT":
            return await put_metadata(gw, req, ctx, bucket, key)
    if head == "object" and rest and m == "GET":
        bucket, _, key = rest.partition("/")
        return await get_object_bytes(gw, req, bucket, key)
    if head == "data" and rest and m == "PUT":
        bucket, _, key = rest.partition("/")
        return await put_data(gw, req, ctx, bucket)
    if head == "replica" and rest and m == "PUT":
        bucket, _, key = rest.partition("/")
        return await put_replica(gw, req, ctx, bucket, key)
    if head == "batchDelete" and m == "POST":
        locations = _locations(await read_document(req, ctx))
        await gw.free([{"location": locations}])
        return json_response({"deleted": len(locations)})
    if head in ("batchRead", "batchReplica", "batchUpdate") and not rest and m == "POST":
        return await BATCH_ROUTES[head](gw, req, ctx)
    if head == "replication" and rest == "failed" and m == "GET":
        return await failed(gw, req)
    if head == "replication" and rest == "retry" and m == "POST":
        return await retry(gw, req, ctx)
    raise S3Error("MethodNotAllowed", f"no internal route {m} {route}")


def wait_journal(gw: Gateway, after: int, deadline: float, cancel: threading.Event) -> None:
    """Block until an entry after `after` exists, the monotonic `deadline` passes, `cancel`
    is set (the client went away) or the gateway closes. The deadline dates from the
    request's arrival: a poll that waited for a free thread waits only what is left."""
    while not gw.closing and not cancel.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0 or gw.store.wait_journal(after, min(0.25, remaining)):
            return


async def _long_poll(gw: Gateway, req: Request, after: int, deadline: float) -> None:
    """Wait for entries after `after` on a polling thread, giving the thread back as soon
    as the client hangs up; ConnectionError then (nobody is left to answer)."""
    cancel = threading.Event()
    waiting = asyncio.ensure_future(gw.run_wait(wait_journal, gw, after, deadline, cancel))
    gone = asyncio.ensure_future(client_gone(req))
    try:
        await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not waiting.done():
            cancel.set()
    if not waiting.done():
        raise ConnectionError("the journal reader went away")
    waiting.result()


def _locations(body: bytes) -> list[dict[str, Any]]:
    """batchDelete's `{"locations": [{location, dataKey, ...}, ...]}`; MalformedJSON else."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    locations = doc.get("locations") if isinstance(doc, dict) else None
    if not is_location_list(locations):
        raise S3Error("MalformedJSON", 'body must be {"locations": [{"location": ..., "dataKey": ...}, ...]}',
                      status=400)
    return locations


async def journal(gw: Gateway, req: Request) -> Response:
    after = _int(req.query, "after", 0)
    limit = min(_int(req.query, "limit", 1000, low=1), 10_000)
    wait = min(_seconds(req.query, "wait"), MAX_WAIT)
    deadline = time.monotonic() + wait
    try:
        # (JournalAhead: a reader past the last entry would wait for entries that never come)
        entries = await gw.run(gw.store.read_journal, after, limit)
        if not entries and wait > 0:
            await _long_poll(gw, req, after, deadline)
            entries = await gw.run(gw.store.read_journal, after, limit)
    except JournalAhead as exc:
        return json_response(
            {"error": "AheadOfJournal", "message": str(exc), "lastSeq": exc.last_seq}, status=409,
        )
    except JournalTruncated as exc:
        return json_response(
            {"error": "TruncatedJournal", "message": str(exc), "firstAvailable": exc.first_available},
            status=410,
        )
    # a page of thousands of entries takes tens of milliseconds to encode: off the loop,
    # where it held every other request (p99 2 ms -> 33 ms at limit=10000)
    body = _ndjson(entries) if len(entries) <= 100 else await gw.run(_ndjson, entries)
    return Response(headers={"content-type": "application/x-ndjson"}, body=body)


def _ndjson(entries: list[Any]) -> bytes:
    return b"".join(orjson.dumps(e.to_json()) + b"\n" for e in entries)


async def get_metadata(gw: Gateway, req: Request, bucket: str, key: str) -> Response:
    version_id = req.query.get("versionId")
    meta = await gw.run(gw.store.get_version, bucket, key, version_id)
    if meta is None:
        # the same names the PUT of this route answers with
        if await gw.run(gw.store.get_bucket, bucket) is None:
            return json_response({"error": "NoSuchBucket", "bucket": bucket}, status=404)
        error = "NoSuchVersion" if version_id is not None else "NoSuchKey"
        return json_response({"error": error, "bucket": bucket, "key": key}, status=404)
    return json_response(meta)


async def put_metadata(gw: Gateway, req: Request, ctx: Any, bucket: str, key: str) -> Response:
    try:
        doc = orjson.loads(await read_document(req, ctx))
        if not isinstance(doc, dict) or not isinstance(doc["metadata"], dict):
            raise TypeError("not an object")
        meta = dict(doc["metadata"])
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise S3Error("MalformedJSON", "body must be {\"metadata\": {...}, ...}", status=400) from exc
    check_version(meta)
    version_id = req.query.get("versionId") or meta.get("versionId")
    if not version_id:
        raise S3Error("InvalidArgument", "versionId is required")
    meta.update({"bucket": bucket, "key": key, "versionId": version_id})
    found = await gw.run(gw.store.get_bucket, bucket)
    if found is None:
        return json_response({"error": "NoSuchBucket", "bucket": bucket}, status=404)
    if doc.get("create"):
        if not meta.get("sortKey"):
            raise S3Error("InvalidArgument", "a created version needs its sortKey")
        refusal = replica_bucket_error(found, bucket, meta.get("owner"))
        if refusal is not None:
            raise refusal
        as_replica(meta)
        outcome = (await gw.run(store_replicas, gw.store, [meta]))[0]
        if isinstance(outcome, BaseException):
            raise outcome
        await gw.free(unreferenced(outcome[1], meta))
        stored = await gw.run(gw.store.get_version, bucket, key, version_id)
        return json_response(stored)
    expected = doc.get("expectedRevision")
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise S3Error("InvalidArgument", "expectedRevision (an integer) or create is required")
    try:
        stored = await gw.run(
            gw.store.update_version, bucket, key, version_id, meta, expected_revision=expected
        )
    except NoSuchVersion:
        return json_response({"error": "NoSuchVersion"}, status=404)
    except RevisionMismatch as exc:
        return json_response({"error": "RevisionMismatch", "current": exc.current}, status=409)
    if stored is None:
        return json_response({"error": "NoSuchVersion"}, status=404)
    return json_response(stored)


DISCARD_PART_BYTES = 64 * 1024 * 1024  # a refused replica part read and dropped up to this


async def put_data(gw: Gateway, req: Request, ctx: Any, bucket_name: str) -> Response:
    bucket = await gw.run(gw.store.get_bucket, bucket_name)
    if bucket is None:
        return json_response({"error": "NoSuchBucket", "bucket": bucket_name}, status=404)
    location = req.query.get("location")
    if location is not None and location not in gw.repositories:
        raise S3Error("InvalidArgument", f"no data location {location!r}")
    # the replica these bytes are for could not be made: say so before storing any (a
    # large version's parts would be copied whole, then discarded)
    refusal = replica_bucket_error(bucket, bucket_name, req.query.get("owner"))
    if refusal is not None:
        # the part read and dropped, not left unread: the connection stays usable (closed
        # under the pipeline's pooled client, it raced that client's next request, which
        # then failed once for nothing)
        await req.discard_body(limit=DISCARD_PART_BYTES)
        raise refusal
    repo = gw.repository(location) if location is not None else gw.location_for(bucket)
    # md5=0: the caller (a part of a large replica) checks the bytes with a flexible
    # checksum instead; MD5 is the slowest hash on the data path.
    want_md5 = req.query.get("md5", "1") != "0"
    written, _ = await write_body(gw, req, ctx, repo, md5=want_md5)
    return json_response({"location": [written.location.to_json()], "md5": written.md5_hex})


async def put_replica(gw: Gateway, req: Request, ctx: Any, bucket_name: str, key: str) -> Response:
    """A replica version with its data in one request (small versions of the replication
    engine): same contract as `data` followed by `metadata` with `create`."""
    try:
        meta = orjson.loads(base64.urlsafe_b64decode(req.headers["x-amz-crossbeat-metadata"]))
        if not isinstance(meta, dict):
            raise TypeError("not an object")
    except (KeyError, ValueError, TypeError, orjson.JSONDecodeError) as exc:
        raise S3Error("InvalidArgument", "x-amz-crossbeat-metadata must hold base64url JSON object metadata") from exc
    version_id = req.query.get("versionId") or meta.get("versionId")
    if not version_id or not meta.get("sortKey"):
        raise S3Error("InvalidArgument", "a replica needs its versionId and sortKey")
    check_version(meta, data_given=True)
    as_replica(meta)
    meta.update({"bucket": bucket_name, "key": key, "versionId": version_id})
    bucket = await gw.run(gw.store.get_bucket, bucket_name)
    if bucket is None:
        return json_response({"error": "NoSuchBucket", "bucket": bucket_name}, status=404)
    refusal = replica_bucket_error(bucket, bucket_name, meta.get("owner"))
    if refusal is not None:
        raise refusal  # before a byte is stored

    def commit(written: Written) -> dict[str, Any]:
        if written.size != int(meta.get("size") or 0):
            raise S3Error("IncompleteBody", f"replica has {written.size} bytes, metadata says {meta.get('size')}")
        etag = str(meta.get("etag") or "")
        if etag and "-" not in etag and etag != written.md5_hex:
            raise S3Error("BadDigest", "replica bytes do not match the source ETag")
        new_loc = written.location.to_json()
        meta["location"] = [new_loc]
        outcome = store_replicas(gw.store, [meta])[0]
        if isinstance(outcome, BaseException):
            raise outcome  # the data just written is deleted (write_body)
        gw.free_now(unreferenced(outcome[1], meta))
        stored = gw.store.get_version(bucket_name, key, version_id)
        assert stored is not None
        return stored

    _, stored = await write_body(gw, req, ctx, gw.location_for(bucket), then=commit)
    return json_response(stored)


def _failed_versions(gw: Gateway, limit: int, marker: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for bucket in gw.store.list_buckets():
        if not bucket.replication:
            continue
        for meta in gw.versions(bucket.name):
            if len(out) >= limit:
                break
            info = meta.get("replicationInfo") or {}
            token = f"{bucket.name}/{meta['key']}/{meta['versionId']}"
            if info.get("status") == "FAILED" and token > marker:
                out.append({
                    "bucket": bucket.name, "key": meta["key"], "versionId": meta["versionId"],
                    "backends": info.get("backends", []), "lastModified": meta.get("lastModified"),
                })
    return out[:limit]


async def failed(gw: Gateway, req: Request) -> Response:
    limit = max(1, min(_int(req.query, "limit", 1000), 10_000))
    items = await gw.run(_failed_versions, gw, limit, req.query.get("marker", ""))
    return json_response({"failed": items})


def _requeue(gw: Gateway, bucket: str, key: str, version_id: str) -> bool:
    """FAILED backends → PENDING with compare-and-set; True if something was requeued."""
    for _ in range(20):
        meta = gw.store.get_version(bucket, key, version_id)
        if meta is None:
            return False
        info = meta.get("replicationInfo") or {}
        backends = [dict(b) for b in info.get("backends") or []]
        if not any(b.get("status") == "FAILED" for b in backends):
            return False
        for b in backends:
            if b.get("status") == "FAILED":
                b["status"] = "PENDING"
        new = dict(meta)
        new["replicationInfo"] = dict(info, backends=backends, status=global_status(backends))
        try:
            gw.store.update_version(bucket, key, version_id, new, expected_revision=meta["revision"])
            return True
        except RevisionMismatch:
            continue
    return False


async def retry(gw: Gateway, req: Request, ctx: Any) -> Response:
    doc = orjson.loads(await read_document(req, ctx) or b"{}")
    if doc.get("all"):
        targets = [(f["bucket"], f["key"], f["versionId"]) for f in await gw.run(_failed_versions, gw, 100_000, "")]
    elif all(k in doc for k in ("bucket", "key", "versionId")):
        targets = [(doc["bucket"], doc["key"], doc["versionId"])]
    else:
        raise S3Error("InvalidArgument", 'body must be {"all": true} or {"bucket", "key", "versionId"}')
    requeued = 0
    for bucket, key, version_id in targets:
        if await gw.run(_requeue, gw, bucket, key, version_id):
            requeued += 1
    return json_response({"requeued": requeued})
