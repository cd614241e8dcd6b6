"""A client of a crossbeat gateway: its internal `/_/crossbeat/` routes and plain S3 GET.

Every call is SigV4-signed with the admin credentials. Transport failures and 5xx answers
become retryable `ReplicationError`s; other 4xx answers are not retryable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson

from crossbeat.extensions.replication.errors import ReplicationError, RevisionMismatch, http_error
from crossbeat.extensions.replication.settings import Endpoint
from crossbeat.populator.auth import SigV4HttpxAuth, quote_path, quote_query

INTERNAL = "/_/crossbeat"


class GatewayClient:
    """Thread-safe (httpx.Client is); one per endpoint per process is enough."""

    def __init__(self, endpoint: Endpoint, *, timeout: float = 60.0, pool: int = 64) -> None:
        self.endpoint = endpoint.endpoint.rstrip("/")
        auth = SigV4HttpxAuth(
            endpoint.access_key, endpoint.secret_key.get_secret_value(), endpoint.region
        )
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
        self._http = httpx.Client(base_url=self.endpoint, auth=auth, timeout=timeout, limits=limits)

    def _request(self, method: str, url: str, what: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise ReplicationError(f"{what}: {exc!r}", retryable=True) from exc

    @staticmethod
    def _version_url(route: str, bucket: str, key: str, version_id: str) -> str:
        return f"{INTERNAL}/{route}{quote_path(bucket, key)}?{quote_query({'versionId': version_id})}"

    def get_metadata(self, bucket: str, key: str, version_id: str) -> dict[str, Any] | None:
        """The version's metadata (with `revision`), or None when it does not exist."""
        url = self._version_url("metadata", bucket, key, version_id)
        resp = self._request("GET", url, "get metadata")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise http_error(f"get metadata {bucket}/{key}", resp.status_code, resp.text)
        doc: dict[str, Any] = resp.json()
        return doc

    def put_metadata_cas(
        self, md: dict[str, Any], expected_revision: int
    ) -> dict[str, Any] | None:
        """Compare-and-set; RevisionMismatch if it changed, None if the version is gone."""
        url = self._version_url("metadata", md["bucket"], md["key"], md["versionId"])
        body = orjson.dumps({"metadata": md, "expectedRevision": expected_revision})
        resp = self._request("PUT", url, "put metadata", content=body,
                             headers={"content-type": "application/json"})
        if resp.status_code == 409:
            raise RevisionMismatch(resp.json().get("current") or {})
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise http_error("put metadata", resp.status_code, resp.text)
        stored: dict[str, Any] = resp.json()
        return stored

    def put_metadata_create(self, md: dict[str, Any]) -> dict[str, Any]:
        """Insert (or replace, same versionId) a replica version as given."""
        url = self._version_url("metadata", md["bucket"], md["key"], md["versionId"])
        body = orjson.dumps({"metadata": md, "create": True})
        resp = self._request("PUT", url, "create metadata", content=body,
                             headers={"content-type": "application/json"})
        if resp.status_code != 200:
            raise http_error(f"create metadata {md['bucket']}/{md['key']}", resp.status_code,
                             resp.text)
        stored: dict[str, Any] = resp.json()
        return stored

    def put_data(
        self, bucket: str, key: str, body: bytes | Iterator[bytes], length: int
    ) -> tuple[list[dict[str, Any]], str]:
        """Store raw bytes in the bucket's location; returns (location entries, md5 hex)."""
        url = f"{INTERNAL}/data{quote_path(bucket, key)}"
        resp = self._request("PUT", url, "put data", content=body,
                             headers={"content-length": str(length)})
        if resp.status_code != 200:
            raise http_error(f"put data {bucket}/{key}", resp.status_code, resp.text)
        doc = resp.json()
        return list(doc["location"]), str(doc.get("md5") or "")

    def batch_delete(self, locations: list[dict[str, Any]]) -> None:
        if not locations:
            return
        resp = self._request("POST", f"{INTERNAL}/batchDelete", "batch delete",
                             content=orjson.dumps({"locations": locations}),
                             headers={"content-type": "application/json"})
        if resp.status_code != 200:
            raise http_error("batch delete", resp.status_code, resp.text)

    def failed(self, limit: int = 1000, marker: str = "") -> list[dict[str, Any]]:
        params: dict[str, str | int | float] = {"limit": limit}
        if marker:
            params["marker"] = marker
        resp = self._request("GET", f"{INTERNAL}/replication/failed?{quote_query(params)}",
                             "list failed")
        if resp.status_code != 200:
            raise http_error("list failed", resp.status_code, resp.text)
        doc = resp.json()
        items: list[dict[str, Any]] = doc["failed"] if isinstance(doc, dict) else doc
        return items

    def retry(self, target: dict[str, Any]) -> int:
        """Requeue FAILED sites: `{"all": true}` or `{"bucket", "key", "versionId"}`."""
        resp = self._request("POST", f"{INTERNAL}/replication/retry", "retry",
                             content=orjson.dumps(target),
                             headers={"content-type": "application/json"})
        if resp.status_code != 200:
            raise http_error("retry", resp.status_code, resp.text)
        return int(resp.json().get("requeued", 0))

    @contextmanager
    def get_object(self, bucket: str, key: str, version_id: str) -> Iterator[httpx.Response]:
        """Stream one version's bytes with a plain S3 GET (the response is open inside)."""
        url = f"{quote_path(bucket, key)}?{quote_query({'versionId': version_id})}"
        try:
            with self._http.stream("GET", url) as resp:
                if resp.status_code != 200:
                    resp.read()
                    raise http_error(f"get object {bucket}/{key}", resp.status_code, resp.text)
                yield resp
        except httpx.TransportError as exc:
            raise ReplicationError(f"get object: {exc!r}", retryable=True) from exc

    def close(self) -> None:
        self._http.close()
