"""A client of a crossbeat gateway: its internal `/_/crossbeat/` routes and plain S3 GET.

Every call is SigV4-signed with the admin credentials. Transport failures and 5xx answers
become retryable `ReplicationError`s; other 4xx answers are not retryable.

It speaks HTTP through urllib3 rather than httpx: this client is on the hot path of every
replicated version, and urllib3 costs about half the CPU per request.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import crc32c
import orjson
import urllib3

from crossbeat.extensions.replication.errors import (
    UNAVAILABLE_CODES,
    UNAVAILABLE_STATUSES,
    ReplicationError,
    RevisionMismatch,
    http_error,
)
from crossbeat.extensions.replication.settings import Endpoint
from crossbeat.populator.auth import UNSIGNED_PAYLOAD, SigV4Signer, quote_path, quote_query

INTERNAL = "/_/crossbeat"
JSON = {"content-type": "application/json"}
READ_CHUNK = 1024 * 1024
BATCH_ITEMS = 500  # per batch request (the gateway takes up to 1000)


class ObjectStream:
    """An object's bytes being read: iterate for chunks of READ_CHUNK bytes, or `readinto`
    a caller's buffer (no new allocation per part: fresh multi-MiB buffers cost page faults
    on every byte, which dominated relaying large objects)."""

    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._resp.stream(READ_CHUNK)
        except urllib3.exceptions.HTTPError as exc:
            raise ReplicationError(f"reading object data: {exc!r}", retryable=True,
                                   unavailable=True) from exc

    def readinto(self, buffer: bytearray | memoryview) -> int:
        """Fill `buffer`; fewer bytes only at the end of the object."""
        view = memoryview(buffer)
        filled = 0
        try:
            while filled < view.nbytes:
                n = self._resp.readinto(view[filled:])
                if not n:
                    break
                filled += n
        except urllib3.exceptions.HTTPError as exc:
            raise ReplicationError(f"reading object data: {exc!r}", retryable=True,
                                   unavailable=True) from exc
        return filled


class GatewayClient:
    """Thread-safe (urllib3 pools are); one per endpoint per process is enough."""

    def __init__(self, endpoint: Endpoint, *, timeout: float = 60.0, pool: int = 64) -> None:
        self.endpoint = endpoint.endpoint.rstrip("/")
        self._signer = SigV4Signer(
            endpoint.access_key, endpoint.secret_key.get_secret_value(), endpoint.region
        )
        self._http = urllib3.PoolManager(
            maxsize=pool,
            timeout=urllib3.Timeout(connect=10.0, read=timeout),
            retries=False,  # retries are ours: bounded, with backoff, per version
        )

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        body: bytes | memoryview | Iterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
        *,
        stream: bool = False,
        unsigned: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        url = self.endpoint + path
        hdrs = dict(headers or {})
        if not unsigned and (body is None or isinstance(body, (bytes, memoryview))):
            payload_hash = hashlib.sha256(body or b"").hexdigest()
        else:
            payload_hash = UNSIGNED_PAYLOAD
        hdrs.update(self._signer.sign(method, url, hdrs, payload_hash))
        try:
            return self._http.request(
                # urllib3 sends any buffer (a memoryview too) as one chunk; its stubs list
                # only bytes, file objects and iterables.
                method, url, body=cast(Any, body), headers=hdrs, preload_content=not stream,
                # an object stored with Content-Encoding: gzip is those bytes: urllib3 would
                # decompress them, and the replica would hold other bytes than the source
                redirect=False, decode_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            # refused, timed out, cut off: the endpoint, not this request, is the trouble
            raise ReplicationError(f"{what}: {exc!r}", retryable=True, unavailable=True) from exc

    @staticmethod
    def _text(resp: urllib3.BaseHTTPResponse) -> str:
        return resp.data.decode(errors="replace")

    @staticmethod
    def _version_url(route: str, bucket: str, key: str, version_id: str) -> str:
        return f"{INTERNAL}/{route}{quote_path(bucket, key)}?{quote_query({'versionId': version_id})}"

    def get_metadata(self, bucket: str, key: str, version_id: str) -> dict[str, Any] | None:
        """The version's metadata (with `revision`), or None when it does not exist."""
        url = self._version_url("metadata", bucket, key, version_id)
        resp = self._request("GET", url, "get metadata")
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise http_error(f"get metadata {bucket}/{key}", resp.status, self._text(resp))
        doc: dict[str, Any] = orjson.loads(resp.data)
        return doc

    def put_metadata_cas(
        self, md: dict[str, Any], expected_revision: int
    ) -> dict[str, Any] | None:
        """Compare-and-set; RevisionMismatch if it changed, None if the version is gone."""
        url = self._version_url("metadata", md["bucket"], md["key"], md["versionId"])
        body = orjson.dumps({"metadata": md, "expectedRevision": expected_revision})
        resp = self._request("PUT", url, "put metadata", body, JSON)
        if resp.status == 409:
            raise RevisionMismatch(orjson.loads(resp.data).get("current") or {})
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise http_error("put metadata", resp.status, self._text(resp))
        stored: dict[str, Any] = orjson.loads(resp.data)
        return stored

    def put_metadata_create(self, md: dict[str, Any]) -> dict[str, Any]:
        """Insert (or replace, same versionId) a replica version as given."""
        url = self._version_url("metadata", md["bucket"], md["key"], md["versionId"])
        body = orjson.dumps({"metadata": md, "create": True})
        resp = self._request("PUT", url, "create metadata", body, JSON)
        if resp.status != 200:
            raise http_error(f"create metadata {md['bucket']}/{md['key']}", resp.status,
                             self._text(resp))
        stored: dict[str, Any] = orjson.loads(resp.data)
        return stored

    def put_replica(self, md: dict[str, Any], data: bytes) -> dict[str, Any]:
        """A small replica's bytes and metadata in one request (the gateway writes the data,
        checks it against size and ETag, then creates the version)."""
        url = self._version_url("replica", md["bucket"], md["key"], md["versionId"])
        header = base64.urlsafe_b64encode(orjson.dumps(md)).decode("ascii")
        resp = self._request("PUT", url, "put replica", data,
                             {"content-length": str(len(data)), "x-amz-crossbeat-metadata": header})
        if resp.status != 200:
            raise http_error(f"put replica {md['bucket']}/{md['key']}", resp.status, self._text(resp))
        stored: dict[str, Any] = orjson.loads(resp.data)
        return stored

    def _batch(
        self, route: str, what: str, field: str, items: list[dict[str, Any]], answer: str,
        query: str = "",
    ) -> list[dict[str, Any]]:
        """POST `items` as {field: [...]} in requests of at most BATCH_ITEMS; the answers'
        `answer` lists, concatenated in order."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(items), BATCH_ITEMS):
            body = orjson.dumps({field: items[start:start + BATCH_ITEMS]})
            resp = self._request("POST", f"{INTERNAL}/{route}{query}", what, body, JSON)
            if resp.status != 200:
                raise http_error(what, resp.status, self._text(resp))
            out += orjson.loads(resp.data)[answer]
        return out

    def batch_read(
        self, refs: list[tuple[str, str, str]], inline_below: int
    ) -> list[tuple[dict[str, Any] | None, bytes | None]]:
        """(metadata or None if gone, data if inlined) for each (bucket, key, versionId);
        data is inlined for versions of 1..inline_below bytes the gateway could read."""
        versions = [{"bucket": b, "key": k, "versionId": v} for b, k, v in refs]
        answers = self._batch("batchRead", "batch read", "versions", versions, "versions",
                              f"?{quote_query({'inlineBelow': inline_below})}")
        out: list[tuple[dict[str, Any] | None, bytes | None]] = []
        for item in answers:
            data = item.get("data")
            out.append((item.get("metadata"), None if data is None else base64.b64decode(data)))
        return out

    def batch_replica(self, replicas: list[tuple[dict[str, Any], bytes]]) -> list[ReplicationError | None]:
        """Create small replicas (metadata, bytes) in one request; None or the error of each."""
        items = [{"metadata": md, "data": base64.b64encode(data).decode("ascii")}
                 for md, data in replicas]
        answers = self._batch("batchReplica", "batch replica", "replicas", items, "results")
        return [_item_error(r, "put replica") for r in answers]

    def batch_update(
        self, updates: list[tuple[dict[str, Any], int]]
    ) -> list[dict[str, Any] | RevisionMismatch | ReplicationError | None]:
        """Compare-and-set each (metadata, expected revision): the stored metadata, a
        RevisionMismatch (with the current metadata), None if the version is gone, or the
        error of that item."""
        items = [{"metadata": md, "expectedRevision": rev} for md, rev in updates]
        answers = self._batch("batchUpdate", "batch update", "updates", items, "results")
        out: list[dict[str, Any] | RevisionMismatch | ReplicationError | None] = []
        for r in answers:
            if "metadata" in r:
                out.append(r["metadata"])
            elif r.get("error") == "RevisionMismatch":
                out.append(RevisionMismatch(r.get("current") or {}))
            elif r.get("error") == "NoSuchVersion":
                out.append(None)
            else:
                out.append(_item_error(r, "update metadata"))
        return out

    def put_data(
        self, bucket: str, key: str, body: bytes | memoryview | Iterator[bytes], length: int,
        owner: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Store raw bytes in the bucket's location; returns (location entries, md5 hex).
        The gateway refuses them, as it would the replica they are for, if the bucket is
        missing, not versioned or (given the source bucket's `owner`) another owner's.

        A buffer is sent as an unsigned payload with its CRC32C, which the gateway verifies
        before it answers, and without asking for its MD5 (the md5 returned is then ""):
        the parts of a large version need no MD5, and SHA-256 payload signing plus MD5 on
        both ends were most of the CPU a large relay cost. An iterator is sent unsigned and
        its MD5 returned, for the caller to compare with its own.
        """
        url = f"{INTERNAL}/data{quote_path(bucket, key)}"
        query: dict[str, str | int | float] = {"owner": owner} if owner else {}
        headers = {"content-length": str(length)}
        if isinstance(body, (bytes, memoryview)):
            crc = crc32c.crc32c(body).to_bytes(4, "big")
            headers["x-amz-checksum-crc32c"] = base64.b64encode(crc).decode("ascii")
            url += "?" + quote_query({"md5": "0", **query})
            resp = self._request("PUT", url, "put data", body, headers, unsigned=True)
        else:
            if query:
                url += "?" + quote_query(query)
            resp = self._request("PUT", url, "put data", body, headers)
        if resp.status != 200:
            raise http_error(f"put data {bucket}/{key}", resp.status, self._text(resp))
        doc = orjson.loads(resp.data)
        return list(doc["location"]), str(doc.get("md5") or "")

    def batch_delete(self, locations: list[dict[str, Any]]) -> None:
        if not locations:
            return
        resp = self._request("POST", f"{INTERNAL}/batchDelete", "batch delete",
                             orjson.dumps({"locations": locations}), JSON)
        if resp.status != 200:
            raise http_error("batch delete", resp.status, self._text(resp))

    def failed(self, limit: int = 1000, marker: str = "") -> list[dict[str, Any]]:
        params: dict[str, str | int | float] = {"limit": limit}
        if marker:
            params["marker"] = marker
        resp = self._request("GET", f"{INTERNAL}/replication/failed?{quote_query(params)}",
                             "list failed")
        if resp.status != 200:
            raise http_error("list failed", resp.status, self._text(resp))
        doc = orjson.loads(resp.data)
        items: list[dict[str, Any]] = doc["failed"] if isinstance(doc, dict) else doc
        return items

    def retry(self, target: dict[str, Any]) -> int:
        """Requeue FAILED sites: `{"all": true}` or `{"bucket", "key", "versionId"}`."""
        resp = self._request("POST", f"{INTERNAL}/replication/retry", "retry",
                             orjson.dumps(target), JSON)
        if resp.status != 200:
            raise http_error("retry", resp.status, self._text(resp))
        return int(orjson.loads(resp.data).get("requeued", 0))

    @contextmanager
    def get_object(self, bucket: str, key: str, version_id: str) -> Iterator[ObjectStream]:
        """Stream one version's bytes (valid inside the block) through the internal object
        route, which reads any user's bucket (a plain GET with admin credentials is
        AccessDenied in a bucket the admin does not own); from a gateway without that route
        (an older crossbeat), with a plain S3 GET."""
        url = self._version_url("object", bucket, key, version_id)
        resp = self._request("GET", url, "get object", stream=True)
        body = resp.read() if resp.status != 200 else b""  # an error document: small
        if resp.status == 404 and b"NoSuchRoute" in body:
            resp.release_conn()
            url = f"{quote_path(bucket, key)}?{quote_query({'versionId': version_id})}"
            resp = self._request("GET", url, "get object", stream=True)
            body = resp.read() if resp.status != 200 else b""
        try:
            if resp.status != 200:
                raise http_error(f"get object {bucket}/{key}", resp.status,
                                 body.decode(errors="replace"))
            yield ObjectStream(resp)
        finally:
            resp.release_conn()

    def ping(self) -> None:
        """Raise the `unavailable` ReplicationError of an endpoint that does not answer, or
        answers that it cannot take requests; return if it answers otherwise (ListBuckets:
        a refusal is an answer)."""
        resp = self._request("GET", "/", "ping")
        if resp.status in UNAVAILABLE_STATUSES:
            raise http_error(f"ping {self.endpoint}", resp.status, self._text(resp))

    def close(self) -> None:
        self._http.clear()


def _item_error(result: dict[str, Any], what: str) -> ReplicationError | None:
    """A batch item's error as the ReplicationError a single request would have raised."""
    if "error" not in result:
        return None
    code = str(result.get("error"))
    # what a single request's 5xx would be: a full destination disk (507) may be freed
    return ReplicationError(f"{what}: {code}: {result.get('message', '')}",
                            retryable=code == "InternalError",
                            unavailable=code in UNAVAILABLE_CODES)
