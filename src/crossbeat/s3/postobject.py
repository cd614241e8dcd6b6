"""POST Object: uploads from an HTML form (`POST /{bucket}`, multipart/form-data, no
Authorization header), what boto3's `generate_presigned_post` prepares.

Contract, as AWS S3 answers (observed behaviour where it differs from AWS's documentation):
- The request names no sub-resource; a body that is not multipart/form-data is 412
  PreconditionFailed, one without a boundary or not well-formed MalformedPOSTRequest.
- Field names are case-insensitive, values case-sensitive. The part named `file` is the
  object's data and the last part considered: anything after it is ignored. Fields before it
  may take at most 20,480 bytes (MaxPostPreDataLengthExceeded); no file part is
  InvalidArgument. A field given twice is InvalidArgument (which one the policy checked
  would be ambiguous).
- Authentication is the form's: SigV4 (`x-amz-algorithm`, `x-amz-credential`, `x-amz-date`,
  `x-amz-signature` = hex HMAC-SHA256 of the base64 `policy` under the credential's signing
  key) or SigV2 (`AWSAccessKeyId`, `signature` = base64 HMAC-SHA1 of the policy). The
  signature is checked over the policy text as sent, before it is decoded. A form with none
  of these fields is anonymous, and no bucket here accepts anonymous writes (AccessDenied);
  the credential's user must own the bucket, as for PutObject.
- The policy (base64 JSON `{"expiration", "conditions"}`) must not have expired and every
  condition must hold (AccessDenied "Invalid according to Policy: ..."); a malformed one is
  InvalidPolicyDocument. Every field but `file`, `policy`, the signature fields and `x-ignore-*`
  must be named by a condition ("Extra input fields"). A condition on a field the form lacks
  fails, as on S3. `content-length-range` bounds the file (EntityTooSmall/EntityTooLarge).
- The object is written exactly as PutObject writes it (objects.version_builder,
  datapath.write_stream): metadata, versioning, replication info, journal entry, data fsynced
  before the answer. The file streams into the repository a megabyte at a time. A refused
  POST leaves nothing behind: checks that need no data come before any byte is written, and
  a failure afterwards (size, checksum, truncated body) aborts the written data before any
  metadata is committed.
- Answer: `success_action_redirect` (or `redirect`), an absolute http(s) URL: 303 to it with
  `bucket`, `key` and `etag` added to its query; else `success_action_status` 200 (empty),
  201 (a PostResponse document) or 204 (the default, also for any other value). Every answer
  carries ETag and Location (the object's URL), and x-amz-version-id as PutObject's does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from crossbeat.s3 import xmldoc
from crossbeat.s3.auth import (
    ALGORITHM_V4,
    AuthContext,
    Principal,
    hmac_sha256,
    parse_credential,
    signing_key,
)
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.datapath import write_stream
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.objectmeta import system_headers, user_metadata
from crossbeat.s3.objects import (
    refuse_unsupported_writes,
    version_builder,
    version_committer,
    write_headers,
)

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

MAX_PRE_DATA = 20480  # AWS's limit on the form before the file part
MAX_KEY_BYTES = 1024
# Fields no policy condition needs to name (AWS's list); `x-ignore-*` too
_EXEMPT = frozenset({"file", "policy", "x-amz-signature", "signature", "awsaccesskeyid"})
_IGNORED_PREFIX = "x-ignore-"
# SigV4 fields in the order AWS reports a missing one, with the spelling it uses
_V4_FIELDS = (
    ("x-amz-algorithm", "X-Amz-Algorithm"),
    ("x-amz-credential", "X-Amz-Credential"),
    ("x-amz-date", "X-Amz-Date"),
    ("x-amz-signature", "X-Amz-Signature"),
)
_V2_FIELDS = (("awsaccesskeyid", "AWSAccessKeyId"), ("signature", "Signature"))
# Form fields that become the object's headers under the same name
_HEADER_FIELDS = frozenset({
    "cache-control", "content-disposition", "content-encoding", "content-language",
    "content-type", "expires", "x-amz-website-redirect-location", "x-amz-storage-class",
})  # fmt: skip
# Prefixes of form fields passed on as headers so that PutObject's refusals apply to them
_REFUSED_PREFIXES = ("x-amz-server-side-encryption", "x-amz-object-lock-", "x-amz-grant-")
_EXPIRATION = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\Z")
# the body decoder only hashes and checks a POST's file: the form carries the auth
_FORM_CONTEXT = AuthContext(None, "none", None, None, None, None, None, auth_type="post-form")


class _Form:
    """Drives python-multipart over a POST's body: collects the fields up to the `file`
    part, then the file part's bytes; ignores what follows it.

    Raises S3Error from `write`: MalformedPOSTRequest, MaxPostPreDataLengthExceeded,
    InvalidArgument (a field twice, a value that is not UTF-8).
    """

    def __init__(self, boundary: bytes) -> None:
        # lower-cased name -> (name as sent, value)
        self.fields: dict[str, tuple[str, str]] = {}
        self.file_started = False  # the file part's headers are in
        self.file_done = False  # the file part ended (its closing boundary was seen)
        self.filename: str | None = None
        self.saw_part = False
        self._file_pieces: list[bytes] = []
        self._pre_data = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._name: str | None = None
        self._value = bytearray()
        self._in_file = False
        try:
            self._parser = MultipartParser(boundary, {
                "on_part_begin": self._part_begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value_data,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._part_data,
                "on_part_end": self._part_end,
            })  # fmt: skip
        except FormParserError as exc:  # e.g. a boundary longer than RFC 2046 allows
            raise S3Error("MalformedPOSTRequest") from exc

    def write(self, raw: bytes) -> None:
        try:
            self._parser.write(raw)
        except FormParserError as exc:
            raise S3Error("MalformedPOSTRequest") from exc

    def take_file_pieces(self) -> list[bytes]:
        pieces, self._file_pieces = self._file_pieces, []
        return pieces

    # -- parser callbacks (synchronous, from within `write`)
    def _count(self, n: int) -> None:
        # everything before the file's data counts: part headers and field values
        self._pre_data += n
        if self._pre_data > MAX_PRE_DATA:
            raise S3Error("MaxPostPreDataLengthExceeded",
                          extra={"MaxPostPreDataLengthBytes": str(MAX_PRE_DATA)})

    def _part_begin(self) -> None:
        self.saw_part = True
        self._headers, self._name, self._value = [], None, bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        if not self.file_started:
            self._count(end - start)
            self._header_name += data[start:end]

    def _header_value_data(self, data: bytes, start: int, end: int) -> None:
        if not self.file_started:
            self._count(end - start)
            self._header_value += data[start:end]

    def _header_end(self) -> None:
        if not self.file_started:
            self._headers.append((bytes(self._header_name), bytes(self._header_value)))
        self._header_name, self._header_value = bytearray(), bytearray()

    def _headers_finished(self) -> None:
        if self.file_started:
            return
        disposition = next(
            (v for n, v in self._headers if n.strip().lower() == b"content-disposition"), None
        )
        kind, params = parse_options_header(disposition)
        name = params.get(b"name")
        # only a form-data part named `file` is the file (a `file; name=...` part is not)
        if kind != b"form-data" or name is None:
            raise S3Error("MalformedPOSTRequest")
        self._name = _text(name, "field name")
        if self._name.lower() == "file":
            self.file_started = self._in_file = True
            filename = params.get(b"filename")
            self.filename = None if filename is None else _text(filename, "file name")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._file_pieces.append(data[start:end])
        elif not self.file_started:
            self._count(end - start)
            self._value += data[start:end]

    def _part_end(self) -> None:
        if self._in_file:
            self._in_file, self.file_done = False, True
        elif not self.file_started and self._name is not None:
            lower = self._name.lower()
            if lower in self.fields:
                raise S3Error("InvalidArgument", f"The form field {self._name!r} is given more "
                              "than once.", extra={"ArgumentName": self._name})
            self.fields[lower] = (self._name, _text(bytes(self._value), self._name))


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidArgument", f"The {what} is not UTF-8.") from None


def _boundary(content_type: str | None) -> bytes:
    kind, params = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        raise S3Error("PreconditionFailed", "At least one of the pre-conditions you specified did not hold",
                      extra={"Condition": "Bucket POST must be of the enclosure-type multipart/form-data"})
    boundary = params.get(b"boundary")
    if not boundary:
        raise S3Error("MalformedPOSTRequest")
    return boundary


def _missing(name: str) -> S3Error:
    return S3Error(
        "InvalidArgument",
        f"Bucket POST must contain a field named '{name}'.  If it is specified, please check the order of the fields.",
        extra={"ArgumentName": name, "ArgumentValue": ""},
    )


def _value(fields: dict[str, tuple[str, str]], name: str) -> str | None:
    entry = fields.get(name)
    return None if entry is None else entry[1]


def authenticate_form(gw: Gateway, fields: dict[str, tuple[str, str]]) -> tuple[Principal, str]:
    """Who signed the form, and its base64 policy (checked against the signature, not yet
    decoded). InvalidArgument for a missing or malformed signing field, InvalidAccessKeyId,
    SignatureDoesNotMatch; AccessDenied for an unsigned (anonymous) form."""
    v4 = any(name in fields for name, _ in _V4_FIELDS)
    v2 = any(name in fields for name, _ in _V2_FIELDS)
    if not v4 and not v2:
        raise S3Error("AccessDenied", "Access Denied")
    for name, spelled in _V4_FIELDS if v4 else _V2_FIELDS:
        if name not in fields:
            raise _missing(spelled)
    policy = _value(fields, "policy")
    if policy is None:
        raise _missing("Policy")
    if v4:
        algorithm = _value(fields, "x-amz-algorithm")
        if algorithm != ALGORITHM_V4:
            raise S3Error("InvalidArgument", f'X-Amz-Algorithm only supports "{ALGORITHM_V4}"',
                          extra={"ArgumentName": "X-Amz-Algorithm", "ArgumentValue": algorithm or ""})
        credential = _value(fields, "x-amz-credential") or ""
        access_key, date, region = parse_credential(credential, "InvalidArgument")
        amz_date = _value(fields, "x-amz-date") or ""
        if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date):
            raise S3Error("InvalidArgument", "X-Amz-Date must be formated via ISO8601 Long format",
                          extra={"ArgumentName": "X-Amz-Date", "ArgumentValue": amz_date})
        principal = _principal(gw, access_key)
        given = (_value(fields, "x-amz-signature") or "").strip().lower()
        expected = hmac_sha256(signing_key(principal.secret_key, date, region), policy.encode("utf-8")).hex()
    else:
        access_key = _value(fields, "awsaccesskeyid") or ""
        principal = _principal(gw, access_key)
        given = (_value(fields, "signature") or "").strip()
        mac = hmac.new(principal.secret_key.encode("utf-8"), policy.encode("utf-8"), hashlib.sha1)
        expected = base64.b64encode(mac.digest()).decode("ascii")
    if not hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace")):
        raise S3Error("SignatureDoesNotMatch", extra={
            "AWSAccessKeyId": access_key,
            "StringToSign": policy,
            "SignatureProvided": given,
            "StringToSignBytes": " ".join(f"{b:02x}" for b in policy.encode("utf-8")),
        })  # fmt: skip
    return principal, policy


def _principal(gw: Gateway, access_key: str) -> Principal:
    principal = gw.principals.get(access_key)
    if principal is None:
        raise S3Error("InvalidAccessKeyId", extra={"AWSAccessKeyId": access_key})
    return principal


def _invalid_policy(detail: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", f"Invalid Policy: {detail}")


def _denied(detail: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {detail}")


def check_policy(
    policy_b64: str, fields: dict[str, tuple[str, str]], bucket: str, key: str, now: datetime
) -> tuple[int, int | None]:
    """Check a signed policy against the form; returns the file's (min, max) size bounds
    (content-length-range, inclusive). InvalidPolicyDocument when it cannot be read;
    AccessDenied when it expired, a condition fails or a field is not covered.
    `key` is the key after `${filename}` substitution, `bucket` the one posted to."""
    try:
        doc = json.loads(base64.b64decode(policy_b64, validate=True))
    except (binascii.Error, ValueError):
        raise _invalid_policy("Invalid JSON.") from None
    if not isinstance(doc, dict):
        raise _invalid_policy("Invalid JSON.")
    for name in doc:
        if name not in ("expiration", "conditions"):
            raise _invalid_policy(f"Unexpected: '{str(name).lower()}'")
    if "expiration" not in doc:
        raise _invalid_policy("Policy missing expiration.")
    if "conditions" not in doc:
        raise _invalid_policy("Policy missing conditions.")
    expiration = doc["expiration"]
    match = _EXPIRATION.match(expiration) if isinstance(expiration, str) else None
    try:
        if match is None:
            raise ValueError
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        fraction = int((match.group(7) or "0").ljust(6, "0")[:6])
        expires = datetime(year, month, day, hour, minute, second, fraction, tzinfo=UTC)
    except ValueError:
        raise _invalid_policy(f"Invalid 'expiration' value: '{expiration}'") from None
    conditions = doc["conditions"]
    if not isinstance(conditions, list):
        raise _invalid_policy("Invalid 'conditions' value: must be a List.")
    if now >= expires:
        raise _denied("Policy expired.")

    def actual(ref: str) -> str | None:
        name = ref.lower()
        if name == "bucket":
            return bucket
        if name == "key":
            return key
        return _value(fields, name)

    covered: set[str] = set()
    low, high = 0, None
    for cond in conditions:
        if isinstance(cond, dict):
            if len(cond) != 1:
                raise _invalid_policy("Invalid Simple-Condition: Simple-Conditions must have exactly one property specified.")
            (name, expected), = cond.items()
            if not isinstance(expected, str):
                raise _invalid_policy("Invalid Simple-Condition: value must be a string.")
            covered.add(name.lower())
            # S3 reports a simple condition as the `eq` it stands for
            if actual(name) != expected:
                raise _denied(f"Policy Condition failed: {_shown(['eq', '$' + name, expected])}")
            continue
        if not isinstance(cond, list):
            raise _invalid_policy("Invalid condition test: must be a List or Object.")
        if not cond or not isinstance(cond[0], str):
            raise _invalid_policy("Invalid Condition: missing operation identifier.")
        op = cond[0].lower()
        if op not in ("eq", "starts-with", "content-length-range"):
            raise _invalid_policy(f"Invalid Condition: unknown operation '{cond[0]}'.")
        if len(cond) != 3:
            raise _invalid_policy(f"Invalid {cond[0]}: wrong number of arguments.")
        if op == "content-length-range":
            bounds = [_bound(b) for b in cond[1:]]
            if bounds[0] is None or bounds[1] is None:
                raise _denied(f"Policy Condition failed: {_shown(cond)}")
            low, high = max(low, bounds[0]), bounds[1] if high is None else min(high, bounds[1])
            continue
        ref, expected = cond[1], cond[2]
        if not isinstance(ref, str) or not isinstance(expected, str):
            raise _invalid_policy("Invalid JSON.")
        if ref.startswith("$"):
            covered.add(ref[1:].lower())
            value = actual(ref[1:])
            ok = value is not None and (value == expected if op == "eq" else value.startswith(expected))
        else:
            ok = False  # S3: a name without its `$` names no field
        if not ok:
            raise _denied(f"Policy Condition failed: {_shown(cond)}")
    extra = [
        sent for name, (sent, _) in fields.items()
        if name not in _EXEMPT and name not in covered and not name.startswith(_IGNORED_PREFIX)
    ]
    if extra:
        raise _denied("Extra input fields: " + ", ".join(extra))
    return low, high


def _bound(value: Any) -> int | None:
    """A content-length-range bound: a non-negative integer, also written as a string. None
    for one that is no number (S3 then fails the condition); a negative or fractional one
    makes the policy invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            return None
        value = int(value)
    if not isinstance(value, int):
        raise _invalid_policy("Invalid JSON.")
    if value < 0:
        raise _invalid_policy("Invalid content-length-range: bounds must not be negative.")
    return value


def _shown(cond: list[Any]) -> str:
    return json.dumps(cond, ensure_ascii=False)


def object_key(fields: dict[str, tuple[str, str]], filename: str | None) -> str:
    """The `key` field with `${filename}` replaced by the file part's filename (kept as is
    when the part has none, as S3 does). InvalidArgument when missing or empty,
    KeyTooLongError over 1024 bytes."""
    key = _value(fields, "key")
    if key is None:
        raise _missing("key")
    if filename is not None:
        key = key.replace("${filename}", filename)
    if not key:
        raise S3Error("InvalidArgument", "User key must have a length greater than 0.",
                      extra={"ArgumentName": "key", "ArgumentValue": ""})
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError")
    return key


def form_headers(fields: dict[str, tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(the object's headers, the body decoder's headers) a form stands for: the standard
    headers, x-amz-meta-*, the storage class, `acl` as x-amz-acl and the refused write
    options under their header names; checksums (x-amz-checksum-*, Content-MD5) for the
    decoder, `x-amz-checksum-algorithm` as the SDK header that asks for one."""
    headers: dict[str, str] = {}
    decoder: dict[str, str] = {}
    for name, (_, value) in fields.items():
        if name in _HEADER_FIELDS or name.startswith("x-amz-meta-") or name.startswith(_REFUSED_PREFIXES):
            headers[name] = value
        elif name == "acl":
            headers["x-amz-acl"] = value
        elif name == "x-amz-checksum-algorithm":
            decoder["x-amz-sdk-checksum-algorithm"] = value
        elif name.startswith("x-amz-checksum-") or name == "content-md5":
            decoder[name] = value
    return headers, decoder


def _location(req: Request, key: str) -> str:
    """The new object's URL, as S3 gives it: the key percent-encoded, `/` included."""
    scheme = req.scope.get("scheme") or "http"
    host = req.headers.get("host", "")
    path = "" if req.virtual_host else "/" + quote(req.bucket, safe="")
    return f"{scheme}://{host}{path}/{quote(key, safe='')}"


def _redirect(url: str | None) -> str | None:
    """A usable success_action_redirect: only an absolute http(s) URL (S3 ignores others)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.netloc else None


async def post_object(gw: Gateway, req: Request) -> Response:
    """Serve a browser-form upload to `req.bucket` (see the module docstring)."""
    form = _Form(_boundary(req.headers.get("content-type")))
    chunks = req.body_chunks()
    # 1. the fields, up to the file part's headers; nothing is written yet
    while not form.file_started:
        raw = await anext(chunks, None)
        if raw is None:
            break
        form.write(raw)
    if not form.file_started:
        if not form.saw_part:
            raise S3Error("MalformedPOSTRequest")
        raise S3Error("InvalidArgument", "POST requires exactly one file upload per request.",
                      extra={"ArgumentName": "file", "ArgumentValue": "0"})
    fields = form.fields
    key = object_key(fields, form.filename)
    # 2. who signed it, the policy, the bucket, the write's options: all before any data
    principal, policy = authenticate_form(gw, fields)
    low, high = check_policy(policy, fields, req.bucket, key, datetime.now(UTC))
    bucket = await gw.bucket(req.bucket, principal)
    headers, decoder_headers = form_headers(fields)
    refuse_unsupported_writes(headers)
    tagging = _value(fields, "tagging")
    build = version_builder(
        bucket, key, headers,
        tags=xmldoc.parse_tagging(tagging.encode("utf-8")) if tagging else {},
        user_meta=user_metadata(headers), sys_headers=system_headers(headers),
        content_type=headers.get("content-type"),
    )
    decoder = BodyDecoder(_FORM_CONTEXT, decoder_headers)
    # 3. the file, streamed into the repository; the version commits once it is durable
    written, meta = await write_stream(
        gw, _file_bytes(form, chunks, low, high, gw.settings.max_object_bytes), decoder,
        gw.location_for(bucket), version_committer(gw, bucket.name, build),
    )
    assert meta is not None
    location = _location(req, key)
    answer = write_headers(bucket, meta, written)
    answer["location"] = location
    redirect = _redirect(_value(fields, "success_action_redirect") or _value(fields, "redirect"))
    if redirect is not None:
        query = urlencode({"bucket": bucket.name, "key": key, "etag": answer["etag"]})
        sep = "?" if "?" not in redirect else "" if redirect.endswith(("?", "&")) else "&"
        answer["location"] = redirect + sep + query
        return Response(status=303, headers=answer)
    status = _value(fields, "success_action_status")
    if status == "201":
        return xml_response(
            xmldoc.post_response_xml(location, bucket.name, key, meta["etag"]), status=201, headers=answer
        )
    return Response(status=200 if status == "200" else 204, headers=answer)


async def _file_bytes(
    form: _Form, chunks: AsyncIterator[bytes], low: int, high: int | None, limit: int
) -> AsyncIterator[bytes]:
    """The file part's bytes as they arrive; raises (so the written data is aborted) when the
    body ends inside the file (IncompleteBody) or the size is outside [low, high]. What
    follows the file is read and dropped: S3 ignores fields after it."""
    size = 0
    while True:
        for piece in form.take_file_pieces():
            size += len(piece)
            if high is not None and size > high:
                await _too_large(form, chunks, size, high, limit)
            yield piece
        if form.file_done:
            break
        raw = await anext(chunks, None)
        if raw is None:
            raise S3Error("IncompleteBody", "The body ended inside the file part.")
        form.write(raw)
    if size < low:
        raise S3Error("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size",
                      extra={"ProposedSize": str(size), "MinSizeAllowed": str(low)})
    async for _ in chunks:
        pass


async def _too_large(
    form: _Form, chunks: AsyncIterator[bytes], size: int, high: int, limit: int
) -> None:
    """EntityTooLarge for a file over the policy's maximum, with its size as S3 reports it:
    the rest of the file is read (and dropped) to learn it, up to the gateway's object limit,
    which also lets the client read the answer on a connection it has finished sending on."""
    while not form.file_done and size <= limit:
        raw = await anext(chunks, None)
        if raw is None:
            break
        form.write(raw)
        size += sum(len(p) for p in form.take_file_pieces())
    raise S3Error("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size",
                  extra={"ProposedSize": str(size), "MaxSizeAllowed": str(high)})
