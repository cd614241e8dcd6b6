"""Minimal ASGI request/response plumbing for the gateway (no framework on the hot path)."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from crossbeat.s3.header_text import encoded_word

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _RequestIds:
    """Request ids: 8 random hex digits per process (drawn again after a fork) + a counter.

    Unique within a gateway's life like uuid4's, without a getrandom(2) per request.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = secrets.token_hex(4).upper()
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFF:08X}"


new_request_id = _RequestIds()


def parse_query(query_string: bytes) -> dict[str, str]:
    """S3 query parameters: `uploads` ≡ `uploads=`; values percent-decoded (not '+')."""
    out: dict[str, str] = {}
    if not query_string:
        return out
    for part in query_string.decode("latin-1").split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        out[unquote(name)] = unquote(value.replace("+", "%20")) if "+" in value else unquote(value)
    return out


def virtual_host_bucket(host: str, domains: Sequence[str]) -> str | None:
    """The bucket of a virtual-hosted request's Host (`{bucket}.{domain}[:port]`), or None."""
    name, colon, port = host.rpartition(":")
    if not (colon and port.isdigit()):  # no port
        name = host
    name = name.lower().rstrip(".")
    for domain in domains:
        if name.endswith("." + domain) and len(name) > len(domain) + 1:
            return name[: -len(domain) - 1]
    return None


@dataclass
class Request:
    """One S3 request: method, decoded path parts, query, lower-cased headers."""

    scope: Scope
    receive: Receive
    method: str
    raw_path: bytes
    query_string: bytes
    query: dict[str, str]
    headers: dict[str, str]
    raw_headers: list[tuple[bytes, bytes]]
    bucket: str = ""
    key: str = ""
    request_id: str = field(default_factory=new_request_id)
    # every value of each (lower-cased) header, in arrival order: what SigV4 signs
    header_map: dict[str, list[str]] = field(default_factory=dict)
    body_done: bool = False
    body_started: bool = False  # the body has been asked for (so 100 Continue was sent)
    virtual_host: bool = False  # the bucket came from the Host header

    @property
    def has_body(self) -> bool:
        length = self.headers.get("content-length")
        return bool(length and length != "0") or "transfer-encoding" in self.headers

    async def discard_body(self, limit: int = 1024 * 1024) -> bool:
        """Read and drop an unread body of at most `limit` bytes so the connection can be
        reused; False when it is larger (the caller then closes the connection), or when
        the client waits for `100 Continue` to send it: it is then never asked for, and
        the connection closes after the answer (RFC 9110 10.1.1)."""
        if self.body_done or not self.has_body:
            return True
        if not self.body_started and "100-continue" in self.headers.get("expect", "").lower():
            return False
        try:
            length = int(self.headers.get("content-length", "-1"))
        except ValueError:
            return False
        if length < 0 or length > limit:
            return False
        async for _ in self.body_chunks():
            pass
        return True

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive, domains: Sequence[str] = ()) -> Request:
        """The request `scope` describes. Path-style (`/bucket/key`) unless the Host header
        is `{bucket}.{domain}` for one of `domains`: then virtual-hosted (the path is the key).
        """
        raw_headers = list(scope.get("headers") or [])
        header_map: dict[str, list[str]] = {}
        for k, v in raw_headers:
            name = k.decode("latin-1").lower()
            values = header_map.get(name)
            if values is None:
                header_map[name] = [v.decode("latin-1")]
            else:
                values.append(v.decode("latin-1"))
        headers = {k: v[0] if len(v) == 1 else ",".join(v) for k, v in header_map.items()}
        raw_path = scope.get("raw_path") or scope["path"].encode()
        path_only = raw_path.split(b"?", 1)[0]
        qs = scope.get("query_string", b"")
        req = cls(
            scope=scope,
            receive=receive,
            method=scope["method"],
            raw_path=path_only,
            query_string=qs,
            query=parse_query(qs),
            headers=headers,
            raw_headers=raw_headers,
            header_map=header_map,
        )
        path = unquote(path_only.decode("latin-1"), encoding="utf-8", errors="surrogateescape")
        if path.startswith("/"):
            path = path[1:]
        if domains and (bucket := virtual_host_bucket(headers.get("host", ""), domains)):
            req.bucket, req.key, req.virtual_host = bucket, path, True
            return req
        bucket, _, key = path.partition("/")
        req.bucket = bucket
        req.key = key
        return req

    async def body_chunks(self) -> AsyncIterator[bytes]:
        """The raw HTTP body, piece by piece, as uvicorn delivers it."""
        self.body_started = True
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ConnectionError("client disconnected")
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            if not more:
                self.body_done = True
            if chunk:
                yield chunk
            if not more:
                return

    async def read_body(self, limit: int = 16 * 1024 * 1024) -> bytes:
        """The whole raw body (for small XML/JSON documents); refuses more than `limit`."""
        parts: list[bytes] = []
        total = 0
        async for chunk in self.body_chunks():
            total += len(chunk)
            if total > limit:
                from crossbeat.s3.errors import S3Error

                raise S3Error("EntityTooLarge", "The request body is too large.")
            parts.append(chunk)
        return b"".join(parts)


@dataclass
class Response:
    """A response whose body is bytes or an async iterator of bytes."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    async def send(self, send: Send, request: Request, head_only: bool = False) -> None:
        headers = [(b"x-amz-request-id", request.request_id.encode())]
        headers.append((b"x-amz-id-2", request.request_id.encode()))
        for k, v in self.headers.items():
            headers.append((k.encode("latin-1"), _header_value(str(v))))
        has_length = any(k.lower() == "content-length" for k in self.headers)
        if self.stream is None and not has_length and self.status not in (204, 304):
            # (a 204 has no Content-Length; a 304's would have to be the 200's: RFC 9110 8.6)
            headers.append((b"content-length", str(len(self.body)).encode()))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        if head_only:
            await send({"type": "http.response.body", "body": b""})
            if self.stream is not None:
                await _close(self.stream)
            return
        if self.stream is None:
            await send({"type": "http.response.body", "body": self.body})
            return
        # A client gone mid-stream: the lean server's send raises, but uvicorn's returns
        # quietly, and the object would be read to its end for nobody. Watching receive()
        # (nothing else reads it once the body is in) tells either server's disconnect.
        watch = not request.has_body or request.body_done
        gone = asyncio.ensure_future(client_gone(request)) if watch else None
        try:
            async for chunk in self.stream:
                if gone is not None and gone.done():
                    return  # (nobody to finish the response for)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            if gone is not None:
                gone.cancel()
            await _close(self.stream)
        await send({"type": "http.response.body", "body": b""})


def _header_value(value: str) -> bytes:
    """A header value's bytes: latin-1, or for text latin-1 cannot carry an encoded word
    (it was a '?' per character: a value that could never be read back)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return encoded_word(value).encode()


async def client_gone(request: Request) -> None:
    """Return once the client has gone away (any body it sent is drained first)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _close(stream: AsyncIterator[bytes]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


def xml_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    h = {"content-type": "application/xml"}
    h.update(headers or {})
    return Response(status=status, headers=h, body=body)


def json_lines(items: Iterable[bytes]) -> bytes:
    return b"".join(item + b"\n" for item in items)
