"""Batch internal routes: many versions per request for the replication engine.

Replicating a small version one request at a time costs four round trips (read metadata,
read data, write the replica, set the source status), and at a few KiB per version the
per-request cost dominates. These routes carry a whole micro-batch each. All answer 200
with one result per item, in request order; an item that fails is reported and changes
nothing, the others go ahead (a malformed request as a whole is a 400 and changes nothing).

- POST batchRead?inlineBelow=N  {"versions": [{"bucket","key","versionId"}]}
    → {"versions": [{"metadata": md | null, "data": base64?, "dataError": str?}]}
    `data` is inlined for versions of 1..N bytes (N ≤ the gateway's small-object size) while
    the answer's inlined total stays under INLINE_TOTAL; `dataError` says why it was not
    (a corrupt or missing chunk): the caller then reads it with a plain GET, which reports it.
- POST batchReplica {"replicas": [{"metadata": md, "data": base64?}]}
    → {"results": [{"versionId", "revision"} | {"error", "message"}]}
    Same contract as PUT replica/{bucket}/{key} for each: bytes checked against the
    metadata's size and simple ETag, written and made durable, then the version created
    with its versionId and sortKey (a redelivered replica replaces itself). Metadata of the
    whole batch is committed in as few transactions as the store's group commit allows.
    An item for a bucket that is missing or whose versioning is not Enabled is refused
    (NoSuchBucket, InvalidBucketState: see `version_check.replica_bucket_error`).
- POST batchUpdate  {"updates": [{"metadata": md, "expectedRevision": n}]}
    → {"results": [{"metadata": stored} | {"error": "RevisionMismatch", "current": md}
                   | {"error": "NoSuchVersion"} | {"error", "message"}]}
    Compare-and-set of each version, as PUT metadata/{bucket}/{key} with expectedRevision.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from crossbeat.metadata.errors import (
    MetadataError,
    NoSuchBucket,
    NoSuchVersion,
    RevisionMismatch,
    StoreClosed,
    StoreUnavailable,
)
from crossbeat.repositories import Location, ObjectWriter
from crossbeat.repositories.errors import RepositoryUnavailable
from crossbeat.s3.auth import AuthContext
from crossbeat.s3.datapath import (
    _write_whole,
    read_document,
    read_range,
    read_range_sync,
    reads_locally,
)
from crossbeat.s3.errors import S3Error, resource_error
from crossbeat.s3.http import Request, Response
from crossbeat.s3.version_check import (
    as_replica,
    check_version,
    replica_bucket_error,
    store_replicas,
)

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

MAX_ITEMS = 1000
INLINE_TOTAL = 16 * 1024 * 1024
MAX_BATCH_DOCUMENT = 64 * 1024 * 1024


def _json(doc: Any) -> Response:
    return Response(status=200, headers={"content-type": "application/json"}, body=orjson.dumps(doc))


async def _items(req: Request, ctx: AuthContext, field: str) -> list[dict[str, Any]]:
    raw = await read_document(req, ctx, limit=MAX_BATCH_DOCUMENT)
    try:
        doc = orjson.loads(raw)
        items = doc[field]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise S3Error("MalformedJSON", f'body must be {{"{field}": [...]}}', status=400) from exc
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise S3Error("MalformedJSON", f"{field} must be a list of objects", status=400)
    if len(items) > MAX_ITEMS:
        raise S3Error("InvalidArgument", f"at most {MAX_ITEMS} {field} per request")
    return items


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": code, "message": message}


# -- batchRead -------------------------------------------------------------------------------


async def batch_read(gw: Gateway, req: Request, ctx: AuthContext) -> Response:
    items = await _items(req, ctx, "versions")
    refs = []
    for item in items:
        b, k, v = item.get("bucket"), item.get("key"), item.get("versionId")
        if not all(isinstance(x, str) and x for x in (b, k, v)):
            raise S3Error("InvalidArgument", "each version needs bucket, key and versionId")
        refs.append((str(b), str(k), str(v)))
    try:
        inline_below = min(int(req.query.get("inlineBelow") or 0), gw.settings.small_object_bytes)
    except ValueError as exc:
        raise S3Error("InvalidArgument", "inlineBelow must be an integer") from exc
    metas = await gw.run(gw.store.get_versions, refs)
    out: list[dict[str, Any]] = [{"metadata": meta} for meta in metas]
    # Which versions to inline, within INLINE_TOTAL; each is read on the threads that may
    # read it (a remote repository's own: a hung backend must not hold the shared workers
    # every other request needs), the local ones together in one worker call.
    local: list[tuple[int, dict[str, Any]]] = []
    remote: list[tuple[int, dict[str, Any]]] = []
    inlined = 0
    for i, meta in enumerate(metas):
        if meta is None or meta.get("isDeleteMarker"):
            continue
        size = int(meta.get("size") or 0)
        if not 0 < size <= inline_below or inlined + size > INLINE_TOTAL:
            continue
        inlined += size
        (local if reads_locally(gw, meta, 0, size) else remote).append((i, meta))
    if local:
        read = await gw.run(_read_all_of, gw, [meta for _, meta in local])
        for (i, _), outcome in zip(local, read, strict=True):
            _inline(out[i], outcome)
    if remote:
        read = await asyncio.gather(
            *(read_range(gw, meta, 0, int(meta["size"])) for _, meta in remote), return_exceptions=True
        )
        for (i, _), outcome in zip(remote, read, strict=True):
            _inline(out[i], outcome)
    return _json({"versions": out})


def _read_all_of(gw: Gateway, metas: list[dict[str, Any]]) -> list[bytes | BaseException]:
    out: list[bytes | BaseException] = []
    for meta in metas:
        try:
            out.append(read_range_sync(gw, meta, 0, int(meta["size"])))
        except Exception as exc:  # noqa: BLE001 - per item: the caller falls back to GET
            out.append(exc)
    return out


def _inline(item: dict[str, Any], outcome: bytes | BaseException) -> None:
    if isinstance(outcome, BaseException):
        item["dataError"] = f"{type(outcome).__name__}: {outcome}"
    else:
        item["data"] = base64.b64encode(outcome).decode("ascii")


# -- batchReplica ----------------------------------------------------------------------------


async def batch_replica(gw: Gateway, req: Request, ctx: AuthContext) -> Response:
    items = await _items(req, ctx, "replicas")
    results: list[dict[str, Any]] = [{} for _ in items]
    valid: list[tuple[int, dict[str, Any], bytes, Any]] = []  # (index, metadata, data, repo)
    buckets: dict[str, Any] = {}
    for i, item in enumerate(items):
        try:
            meta, data = _replica(item)
        except S3Error as exc:
            results[i] = _error(exc.code, exc.message)
            continue
        name = meta["bucket"]
        if name not in buckets:
            buckets[name] = await gw.run(gw.store.get_bucket, name)
        refusal = replica_bucket_error(buckets[name], name, meta.get("owner"))
        if refusal is not None:  # no data stored for it
            results[i] = _error(refusal.code, refusal.message)
            continue
        valid.append((i, meta, data, gw.location_for(buckets[name])))

    # Data first (durable as a group), then the metadata of the whole batch.
    written = await _store_on_their_threads(gw, [(repo, data) for _, _, data, repo in valid])
    ready: list[tuple[int, dict[str, Any]]] = []
    for (i, meta, _, _), w in zip(valid, written, strict=True):
        if isinstance(w, BaseException):
            wanting = resource_error(w)  # a full disk is InsufficientCapacity, as for a PUT
            code = wanting.code if wanting is not None else "InternalError"
            if isinstance(w, RepositoryUnavailable):  # retryable, as a PUT's 503
                code = "ServiceUnavailable"
            results[i] = _error(code, f"storing replica data: {w}")
            continue
        meta["location"] = [w.to_json()] if w is not None else []
        ready.append((i, meta))
    try:
        stored = await gw.run(store_replicas, gw.store, [meta for _, meta in ready])
        for outcome in stored:  # an error not an item's own failed the whole commit (I/O,
            # the store unavailable or closing): the request fails, retryably, as a PUT's
            if isinstance(outcome, BaseException) and (
                    not isinstance(outcome, (S3Error, MetadataError))
                    or isinstance(outcome, (StoreUnavailable, StoreClosed))):
                raise outcome
    except BaseException:
        # no version was made (SQLITE_FULL, say): the data just written is nobody's
        await asyncio.shield(gw.free([{"location": meta["location"]} for _, meta in ready]))
        raise
    free: list[dict[str, Any]] = []
    for (i, meta), outcome in zip(ready, stored, strict=True):
        if isinstance(outcome, BaseException):
            if isinstance(outcome, S3Error):  # its bucket changed since it was checked
                results[i] = _error(outcome.code, outcome.message)
            else:
                code = "NoSuchBucket" if isinstance(outcome, NoSuchBucket) else "InvalidArgument"
                results[i] = _error(code, str(outcome))
            free.append({"location": meta["location"]})  # never referenced: delete it
            continue
        free.extend(unreferenced(outcome[1], meta))
        results[i] = {"versionId": meta["versionId"]}
    if free:
        await gw.free(free)
    return _json({"results": results})


def _replica(item: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The replica's metadata and bytes, checked against each other."""
    meta = item.get("metadata")
    if not isinstance(meta, dict):
        raise S3Error("InvalidArgument", "each replica needs its metadata")
    meta = dict(meta)
    for field in ("bucket", "key", "versionId", "sortKey"):
        if not isinstance(meta.get(field), str) or not meta[field]:
            raise S3Error("InvalidArgument", f"a replica needs its {field}")
    check_version(meta, data_given=True)
    as_replica(meta)
    try:
        data = base64.b64decode(item.get("data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise S3Error("InvalidArgument", "replica data must be base64") from exc
    if meta.get("isDeleteMarker") and data:
        raise S3Error("InvalidArgument", "a delete marker has no data")
    if len(data) != int(meta.get("size") or 0):
        raise S3Error("IncompleteBody", f"replica has {len(data)} bytes, metadata says {meta.get('size')}")
    etag = str(meta.get("etag") or "").strip('"')
    if data and etag and "-" not in etag and etag != hashlib.md5(data, usedforsecurity=False).hexdigest():
        raise S3Error("BadDigest", "replica bytes do not match the source ETag")
    meta.pop("revision", None)
    meta.pop("isLatest", None)
    return meta, data


async def _store_on_their_threads(
    gw: Gateway, items: list[tuple[Any, bytes]]
) -> list[Location | None | BaseException]:
    """`_store_all` of `items`, in request order: the local repositories' together on the
    shared workers, each remote repository's on its own threads (see `Gateway.run_io`)."""
    groups: dict[int, list[int]] = {}
    for i, (repo, _) in enumerate(items):
        groups.setdefault(id(repo) if repo.io_executor is not None else 0, []).append(i)
    out: list[Location | None | BaseException] = [None] * len(items)

    async def store(indexes: list[int]) -> None:
        repo = items[indexes[0]][0]
        try:
            written = await gw.run_io(repo, _store_all, [items[i] for i in indexes])
        except Exception as exc:  # noqa: BLE001 - its queue full (503): each of its items fails
            written = [exc] * len(indexes)
        for i, w in zip(indexes, written, strict=True):
            out[i] = w

    await asyncio.gather(*(store(indexes) for indexes in groups.values()))
    return out


def _store_all(items: list[tuple[Any, bytes]]) -> list[Location | None | BaseException]:
    """Write each (repository, bytes), then make them durable: objects the repository can
    stage are all written first, so the first commit's group sync covers every one of
    them and the other commits return at once; the rest are written one by one."""
    staged: list[ObjectWriter | None | BaseException] = []
    for repo, data in items:
        try:
            writer = repo.small_writer(data) if data else None
            if writer is not None:
                # written now, so that the first commit's sync covers it; a writer that
                # cannot stage writes its object in `commit`
                writer.stage()
            staged.append(writer)
        except Exception as exc:  # noqa: BLE001 - per item
            staged.append(exc)
    out: list[Location | None | BaseException] = []
    for (repo, data), writer in zip(items, staged, strict=True):
        try:
            if isinstance(writer, BaseException):
                out.append(writer)
            elif writer is not None:
                out.append(writer.commit())
            else:
                out.append(_write_whole(repo, data) if data else None)
        except Exception as exc:  # noqa: BLE001 - per item
            out.append(exc)
    return out


def unreferenced(displaced: list[dict[str, Any]], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The data of displaced versions that the new version `meta` does not point at."""
    keep = {(loc.get("location"), loc.get("dataKey")) for loc in meta.get("location") or []}
    return [
        {"location": [loc for loc in d.get("location") or []
                      if (loc.get("location"), loc.get("dataKey")) not in keep]}
        for d in displaced
    ]


# -- batchUpdate -----------------------------------------------------------------------------


async def batch_update(gw: Gateway, req: Request, ctx: AuthContext) -> Response:
    items = await _items(req, ctx, "updates")
    updates: list[tuple[dict[str, Any], int]] = []
    for item in items:
        meta, expected = item.get("metadata"), item.get("expectedRevision")
        if not isinstance(meta, dict) or isinstance(expected, bool) or not isinstance(expected, int):
            raise S3Error("InvalidArgument", "each update needs metadata and an integer expectedRevision")
        if not all(isinstance(meta.get(f), str) and meta[f] for f in ("bucket", "key", "versionId")):
            raise S3Error("InvalidArgument", "each update's metadata needs bucket, key and versionId")
        check_version(meta)
        updates.append((meta, expected))
    stored = await gw.run(gw.store.update_versions, updates)
    results: list[dict[str, Any]] = []
    for outcome in stored:
        if isinstance(outcome, NoSuchVersion):
            results.append({"error": "NoSuchVersion"})
        elif isinstance(outcome, RevisionMismatch):
            results.append({"error": "RevisionMismatch", "current": outcome.current})
        elif isinstance(outcome, MetadataError):
            results.append(_error("InvalidArgument", str(outcome)))
        else:
            results.append({"metadata": outcome})
    return _json({"results": results})
