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
- Authentication and the policy are the form's (see postpolicy.py): the signature over the
  policy, its expiration, its conditions, every field covered; the credential's user must
  own the bucket, as for PutObject.
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

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from crossbeat.s3 import xmldoc
from crossbeat.s3.auth import (
    AuthContext,
)
from crossbeat.s3.body import BodyDecoder
from crossbeat.s3.datapath import write_stream
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.objectmeta import check_echoable, system_headers, user_metadata
from crossbeat.s3.objects import (
    add_expiration,
    refuse_unsupported_writes,
    version_builder,
    version_committer,
    write_headers,
)
from crossbeat.s3.postpolicy import authenticate_form, check_policy, field_value, missing_field

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

MAX_PRE_DATA = 20480  # AWS's limit on the form before the file part
MAX_KEY_BYTES = 1024
# Form fields that become the object's headers under the same name
_HEADER_FIELDS = frozenset({
    "cache-control", "content-disposition", "content-encoding", "content-language",
    "content-type", "expires", "x-amz-website-redirect-location", "x-amz-storage-class",
})  # fmt: skip
# Prefixes of form fields passed on as headers so that PutObject's refusals apply to them
_REFUSED_PREFIXES = ("x-amz-server-side-encryption", "x-amz-object-lock-", "x-amz-grant-")
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


def object_key(fields: dict[str, tuple[str, str]], filename: str | None) -> str:
    """The `key` field with `${filename}` replaced by the file part's filename (kept as is
    when the part has none, as S3 does). InvalidArgument when missing or empty,
    KeyTooLongError over 1024 bytes."""
    key = field_value(fields, "key")
    if key is None:
        raise missing_field("key")
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
            check_echoable(name, value)
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
    """A usable success_action_redirect: only an absolute http(s) URL (S3 ignores others),
    and one that can be a Location header (no control character or space: urlsplit drops
    CR/LF and tabs silently, and the answer to a stored upload was then a 500)."""
    if not url or any(c <= " " or c == "\x7f" for c in url):
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
    tagging = field_value(fields, "tagging")
    build = version_builder(
        bucket, key, headers,
        tags=xmldoc.parse_tagging(tagging.encode("utf-8")) if tagging else {},
        user_meta=user_metadata(headers, wire=False), sys_headers=system_headers(headers, wire=False),
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
    add_expiration(gw, bucket.name, meta, answer)
    answer["location"] = location
    redirect = _redirect(field_value(fields, "success_action_redirect") or field_value(fields, "redirect"))
    if redirect is not None:
        query = urlencode({"bucket": bucket.name, "key": key, "etag": answer["etag"]})
        # the query goes before any #fragment, which browsers never send to the server
        base, hash_, fragment = redirect.partition("#")
        sep = "?" if "?" not in base else "" if base.endswith(("?", "&")) else "&"
        answer["location"] = base + sep + query + hash_ + fragment
        return Response(status=303, headers=answer)
    status = field_value(fields, "success_action_status")
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
