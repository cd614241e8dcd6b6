"""Applying a bucket's CORS rules as S3 does (the rules themselves: s3/cors_config.py).

- A preflight, `OPTIONS /{bucket}[/{key}]`, is answered without authentication (browsers
  send no credentials with it; no S3 API uses OPTIONS): 400 BadRequest without an `Origin`
  ("Insufficient information. Origin request header needed."); 403 AccessForbidden
  "CORSResponse: Bucket not found" or "CORSResponse: CORS is not enabled for this bucket."
  (ResourceType BUCKET); 400 BadRequest "Invalid Access-Control-Request-Method: null"
  without that header; 403 AccessForbidden "CORSResponse: This CORS request is not
  allowed. …" when no rule allows the origin, the requested method and every requested
  header (ResourceType OBJECT for a key, BUCKET for the bucket); otherwise 200, an empty
  body and the matched rule's headers (`cors_config.response_headers`). The 403s name the
  requested method (`OPTIONS` when none) in `<Method>`, as S3's do. The key is not looked up.
- Any other request carrying `Origin` (every method and route of a bucket, errors and POST
  Object answers included) gets the headers of the first rule matching its origin and its
  method (Access-Control-Request-Method, if sent, stands for the method, and
  Access-Control-Request-Headers, if sent, must be allowed, as on S3); nothing when no rule
  matches or the bucket has no rules. The request itself is served as without `Origin`.

Rules come from `Gateway.cors_of`, a per-process cache: a change made through another
gateway process applies here within `gateway.RECENT_BUCKET_TTL_S`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crossbeat.s3.cors_config import find_rule, requested_headers, response_headers
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

log = logging.getLogger("crossbeat.gateway")

NOT_ALLOWED = (
    "CORSResponse: This CORS request is not allowed. This is usually because the evalution of"
    " Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers"
    " are not whitelisted by the resource's CORS spec."
)


def _forbidden(message: str, method: str, resource_type: str) -> S3Error:
    return S3Error("AccessForbidden", message, status=403,
                   extra={"Method": method, "ResourceType": resource_type})


async def preflight(gw: Gateway, req: Request) -> Response:
    """The answer to an `OPTIONS` request (see the module docstring); S3Error when refused."""
    origin = req.headers.get("origin")
    if not origin:
        raise S3Error("BadRequest", "Insufficient information. Origin request header needed.")
    method = req.headers.get("access-control-request-method")
    found, config = gw.cors_of(req.bucket)
    if not found:
        raise _forbidden("CORSResponse: Bucket not found", method or "OPTIONS", "BUCKET")
    if not config:
        raise _forbidden("CORSResponse: CORS is not enabled for this bucket.", method or "OPTIONS", "BUCKET")
    if not method:
        raise S3Error("BadRequest", "Invalid Access-Control-Request-Method: null")
    headers = requested_headers(req.headers.get("access-control-request-headers"))
    rule = find_rule(config, origin, method, headers)
    if rule is None:
        raise _forbidden(NOT_ALLOWED, method, "OBJECT" if req.key else "BUCKET")
    return Response(headers=response_headers(rule, origin, headers))


async def add_headers(gw: Gateway, req: Request, origin: str, response: Response) -> None:
    """Add to `response` (of a non-OPTIONS request from `origin`) the Access-Control-*
    headers of the bucket's first matching rule, if any. Never fails the request: if the
    rules cannot be read, the response goes without them (and the error is logged)."""
    if not req.bucket:
        return
    try:
        _found, config = gw.cors_of(req.bucket)
    except Exception:  # noqa: BLE001 - the answer itself is already decided
        log.exception("could not read the CORS rules of %r", req.bucket)
        return
    if not config:
        return
    method = req.headers.get("access-control-request-method") or req.method
    headers = requested_headers(req.headers.get("access-control-request-headers"))
    rule = find_rule(config, origin, method, headers)
    if rule is not None:
        # a copy: a handler may answer with a dict it shares between responses
        response.headers = {**response.headers, **response_headers(rule, origin, headers)}
