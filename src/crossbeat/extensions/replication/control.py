"""Steering replication: pausing and resuming a destination site through the control
topic, and listing and requeueing FAILED versions at the source gateway.

A record `{kind: replication.control, site, paused}` keyed by the site name goes to the
one-partition `crossbeat-replication-control` topic. The site's replication query reads
it before planning each batch and, while paused, does not advance its offsets: entries
wait in `crossbeat-replication` and flow again on resume. Works across machines and with
any Kafka cluster, since the state lives in the log.

`ControlClient` is for a person at a terminal (`crossbeat replication failed | retry`):
whatever goes wrong is a `ControlError` of one line, an S3 error as its code and message,
never the XML of the answer.
"""

from __future__ import annotations

import html
import http
import re
import time
from typing import Any

import orjson

from crossbeat.errors import CrossbeatError
from crossbeat.extensions.replication.errors import ReplicationError
from crossbeat.extensions.replication.gateway import INTERNAL, JSON, GatewayClient
from crossbeat.extensions.replication.messages import CONTROL_KIND, SCHEMA
from crossbeat.populator.auth import quote_query
from crossbeat.populator.extension import Message
from crossbeat.populator.publisher import Publisher, ensure_topics

_XML_FIELD = re.compile(rb"<(Code|Message)>([^<]*)</\1>")


def set_paused(brokers: str, topic: str, site: str, paused: bool) -> None:
    """Publish the site's new state and wait until the broker acknowledged it."""
    ensure_topics(brokers, [topic], 1)
    doc = {"kind": CONTROL_KIND, "schema": SCHEMA, "site": site, "paused": paused, "ts": time.time()}
    publisher = Publisher(brokers)
    try:
        publisher.publish([Message(topic, site.encode(), doc)])
    finally:
        publisher.close()


class ControlError(CrossbeatError):
    """A control request that failed. The message is one line; `code` is the gateway's
    error code when it answered with one (`InvalidAccessKeyId`, `InvalidArgument`, …)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def describe_answer(status: int, body: bytes) -> tuple[str | None, str]:
    """(code, one line) for an error answer: `Code: message (HTTP status)` from an S3 XML
    error or a JSON `{"error", "message"}`; else the HTTP status alone, never the body."""
    fields = {m.group(1).decode(): html.unescape(m.group(2).decode(errors="replace"))
              for m in _XML_FIELD.finditer(body[:8192])}
    if "Code" not in fields:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and doc.get("error"):
            fields = {"Code": str(doc["error"]), "Message": str(doc.get("message") or "")}
    code = fields.get("Code")
    if not code:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "error"
        return None, f"HTTP {status} {phrase} (not an S3 error answer)"
    message = " ".join(fields.get("Message", "").split())  # one line, whatever it held
    return code, f"{code}: {message} (HTTP {status})" if message else f"{code} (HTTP {status})"


def _reason(exc: BaseException) -> str:
    """What the innermost cause said (`Connection refused`), not urllib3's wrapping repr."""
    reason = str(exc)
    cause, depth = exc.__cause__, 0
    while cause is not None and depth < 10:
        said = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        reason = said or reason
        cause, depth = cause.__cause__ or cause.__context__, depth + 1
    return reason


class ControlClient(GatewayClient):
    """The source gateway's replication routes, for `crossbeat replication`."""

    def _json(self, method: str, path: str, what: str, body: dict[str, Any] | None = None,
              *, missing_ok: bool = False) -> Any:
        """The answer's JSON document; None for a 404 if `missing_ok`; else ControlError."""
        try:
            resp = self._request(method, path, what,
                                 None if body is None else orjson.dumps(body),
                                 None if body is None else JSON)
        except ReplicationError as exc:  # refused, timed out, cut off
            raise ControlError(f"{what}: no answer from {self.endpoint}: {_reason(exc)}") from exc
        if resp.status == 404 and missing_ok:
            return None
        if resp.status != 200:
            code, line = describe_answer(resp.status, resp.data)
            raise ControlError(f"{what}: {line}", code)
        try:
            return orjson.loads(resp.data)
        except orjson.JSONDecodeError as exc:
            raise ControlError(f"{what}: {self.endpoint} answered with something else than "
                               "JSON: is it a crossbeat gateway?") from exc

    def list_failed(self, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` FAILED versions: {bucket, key, versionId, backends, lastModified}."""
        doc = self._json("GET", f"{INTERNAL}/replication/failed?{quote_query({'limit': limit})}",
                         "list failed")
        items: list[dict[str, Any]] = doc["failed"] if isinstance(doc, dict) else doc
        return items

    def requeue(self, target: dict[str, Any]) -> int:
        """Requeue FAILED sites: `{"all": true}` or `{"bucket", "key", "versionId"}`; how
        many versions were requeued."""
        return int(self._json("POST", f"{INTERNAL}/replication/retry", "retry", target)
                   .get("requeued", 0))

    def version(self, bucket: str, key: str, version_id: str) -> dict[str, Any] | None:
        """The version's metadata at the source, or None if there is no such version."""
        doc: dict[str, Any] | None = self._json(
            "GET", self._version_url("metadata", bucket, key, version_id), "get version",
            missing_ok=True)
        return doc
