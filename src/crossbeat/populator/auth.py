"""SigV4 signing of httpx requests to a gateway's internal `/_/crossbeat/` routes.

The internal routes use ordinary S3 SigV4 with the admin credentials. We sign with
botocore's `SigV4Auth` (service "s3") so the canonicalisation is AWS's own. Only the
headers the gateway must see unchanged are signed (host, content-type, content-md5 and
x-amz-*). Callers build URLs already in canonical form (`quote_path`, `quote_query`).: httpx adds transport headers (connection, accept-encoding, user-agent) that are
not part of the request's meaning.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Mapping
from urllib.parse import quote, urlsplit

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_SIGNED_PLAIN_HEADERS = ("host", "content-type", "content-md5")


class _S3PathSigV4Auth(SigV4Auth):
    """SigV4 with S3's rule for the canonical URI: the path as sent, not re-encoded."""

    def _normalize_url_path(self, path: str) -> str:
        return path


class SigV4Signer:
    """Signs a request given as (method, url, headers, payload hash) for service "s3"."""

    def __init__(self, access_key: str, secret_key: str, region: str = "us-east-1") -> None:
        self._signer = _S3PathSigV4Auth(Credentials(access_key, secret_key), "s3", region)

    def sign(self, method: str, url: str, headers: Mapping[str, str], payload_hash: str) -> dict[str, str]:
        """The headers to add: X-Amz-Date, X-Amz-Content-SHA256 and Authorization.

        `payload_hash` is the body's hex SHA-256, or UNSIGNED_PAYLOAD for a streamed body.
        ValueError if `url` is not an absolute http(s) URL (without a host there is no Host
        header to sign, and botocore failed with an AttributeError).
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"cannot sign a request to {url!r}: not an http(s)://HOST[:PORT] URL")
        signed = {
            name.lower(): value
            for name, value in headers.items()
            if name.lower() in _SIGNED_PLAIN_HEADERS or name.lower().startswith("x-amz-")
        }
        signed.pop("x-amz-date", None)
        signed["x-amz-content-sha256"] = payload_hash
        aws = AWSRequest(method=method, url=url, headers=signed)
        self._signer.add_auth(aws)
        return {
            "x-amz-content-sha256": payload_hash,
            "authorization": aws.headers["Authorization"],
            "x-amz-date": aws.headers["X-Amz-Date"],
        }


class SigV4HttpxAuth(httpx.Auth):
    """An httpx auth flow that signs each request with SigV4 for service "s3".

    A request whose body is already in memory is signed over its SHA-256; a streamed body
    (an iterator) is sent as UNSIGNED-PAYLOAD, which S3 allows, so large objects are never
    buffered to be hashed.
    """

    def __init__(self, access_key: str, secret_key: str, region: str = "us-east-1") -> None:
        self.signer = SigV4Signer(access_key, secret_key, region)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self.sign(request)
        yield request

    def sign(self, request: httpx.Request) -> None:
        """Add X-Amz-Date, X-Amz-Content-SHA256 and Authorization to `request` in place."""
        payload_hash = request.headers.get("x-amz-content-sha256")
        if payload_hash is None:
            if isinstance(request.stream, httpx.ByteStream):
                payload_hash = hashlib.sha256(request.read()).hexdigest()
            else:
                payload_hash = UNSIGNED_PAYLOAD
        added = self.signer.sign(request.method, str(request.url), request.headers, payload_hash)
        request.headers.update(added)


def quote_path(*segments: str) -> str:
    """`/seg1/seg2…` with each segment URI-encoded as SigV4 wants ('/' inside a key kept)."""
    return "".join("/" + quote(seg, safe="/-_.~") for seg in segments)


def quote_query(params: dict[str, str | int | float]) -> str:
    """A canonical query string: keys sorted, every byte but unreserved ones encoded."""
    return "&".join(
        f"{quote(str(k), safe='-_.~')}={quote(str(v), safe='-_.~')}"
        for k, v in sorted(params.items())
    )
