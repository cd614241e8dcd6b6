"""S3 XML documents: rendering every response body and parsing every request body.

Rendering returns UTF-8 bytes that start with the XML declaration; documents carry the S3
namespace (`NS`) except `<Error>`, as AWS does. Parsing is hardened: the body is read with
expat directly, and any DOCTYPE, entity declaration or external entity is refused with
MalformedXML (so XXE and entity-expansion bombs never run). Element names are compared
without their namespace, so clients may send namespaced or plain documents.

Conventions shared with the gateway:
- checksum dicts map the lower-case algorithm name as in `x-amz-checksum-<alg>` (`crc32`,
  `sha512`, `xxhash64`: every one of `checksums.ALGORITHMS`) to the base64 value; they
  render, and parse, as `<ChecksumCRC32>`, `<ChecksumSHA512>`, `<ChecksumXXHASH64>` etc.
- ETags are rendered quoted whatever the caller passes; timestamps accept an ISO8601 string
  (passed through), a datetime, or epoch seconds and render as `2026-01-02T03:04:05.678Z`.
"""

from __future__ import annotations

import datetime as dt
import re
import xml.parsers.expat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote
from xml.etree import ElementTree as ET

from crossbeat.s3.checksums import ALGORITHMS, default_type
from crossbeat.s3.errors import S3Error
from crossbeat.s3.objectmeta import parse_http_date, storage_class

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
XML_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'

# x-amz-checksum-<alg> name -> XML element name, for every algorithm the gateway takes (as
# botocore's model names them): one left out was neither checked in a Complete nor shown
CHECKSUM_ELEMENTS: dict[str, str] = {alg.lower(): f"Checksum{alg}" for alg in ALGORITHMS}
_CHECKSUM_BY_ELEMENT = {v: k for k, v in CHECKSUM_ELEMENTS.items()}

# No S3 document nests deeper than ~6 levels; the bound keeps recursive consumers safe.
MAX_XML_DEPTH = 32
MAX_DELETE_OBJECTS = 1000
MAX_PART_NUMBER = 10000
MAX_OBJECT_TAGS = 10
MAX_BUCKET_TAGS = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256
# Characters AWS allows in tag keys and values: letters, digits, spaces and + - = . _ : / @
_TAG_CHARS = re.compile(r"^[\w\s+\-=._:/@]*$")


# --------------------------------------------------------------------------------------------
# text helpers


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or f"&#x{ord(ch):X};"


_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\r": "&#xD;"}
# Characters that must be escaped in text: markup, quotes (AWS writes &quot; in ETags), CR
# (a parser would normalise it to LF) and the C0 controls XML 1.0 cannot carry literally. Keys
# with controls are only safe for clients that ask for encoding-type=url, as on AWS.
_NEEDS_ESCAPE = re.compile(r'[&<>"\r\x00-\x08\x0b\x0c\x0e-\x1f]')


def xml_text(value: object) -> str:
    """Escape a value for use as element text."""
    text = value if isinstance(value, str) else str(value)
    if _NEEDS_ESCAPE.search(text) is None:
        return text
    return _NEEDS_ESCAPE.sub(_escape_char, text)


def quote_etag(etag: str) -> str:
    """The ETag with exactly one pair of surrounding double quotes."""
    return '"' + etag.strip().strip('"') + '"'


def unquote_etag(etag: str) -> str:
    """The ETag without surrounding quotes (clients send it quoted, escaped or bare)."""
    return etag.strip().replace("&quot;", '"').replace("&#34;", '"').strip('"')


_STORED_MS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d{3}Z")


def iso8601(value: str | dt.datetime | float | int) -> str:
    """A timestamp as S3 renders it: UTC, `.000Z`: whole seconds, as S3 keeps them, and as
    the Last-Modified header says (a tool comparing a listing's time with a file's, set
    from that header, found every object changed: `aws s3 sync --exact-timestamps`
    downloaded them all again on every run). A stored `….mmmZ` string has its
    milliseconds dropped; other strings pass through."""
    if isinstance(value, str):
        m = _STORED_MS.fullmatch(value)
        return f"{m.group(1)}.000Z" if m else value
    if isinstance(value, int | float):
        value = dt.datetime.fromtimestamp(value, tz=dt.UTC)
    value = _utc(value)
    return value.strftime("%Y-%m-%dT%H:%M:%S") + ".000Z"


def _utc(moment: dt.datetime) -> dt.datetime:
    """`moment` in UTC; a naive one is taken as UTC."""
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def bool_text(value: bool) -> str:
    return "true" if value else "false"


class XmlWriter:
    """Appends elements to a list of strings; `bytes()` joins them. Text is escaped."""

    def __init__(self, root: str, *, namespace: bool = True) -> None:
        self._parts: list[str] = [XML_DECL, f'<{root} xmlns="{NS}">' if namespace else f"<{root}>"]
        self._stack = [root]

    def open(self, name: str) -> XmlWriter:
        self._parts.append(f"<{name}>")
        self._stack.append(name)
        return self

    def close(self) -> XmlWriter:
        self._parts.append(f"</{self._stack.pop()}>")
        return self

    def leaf(self, name: str, value: object) -> XmlWriter:
        """`<name>value</name>`; `None` is skipped, `""` renders `<name></name>`."""
        if value is None:
            return self
        if isinstance(value, bool):
            value = bool_text(value)
        self._parts.append(f"<{name}>{xml_text(value)}</{name}>")
        return self

    def raw(self, markup: str) -> XmlWriter:
        """Append already-escaped markup (callers escape every value with `xml_text`)."""
        self._parts.append(markup)
        return self

    def checksums(self, checksums: dict[str, str] | None) -> XmlWriter:
        for alg, value in (checksums or {}).items():
            element = CHECKSUM_ELEMENTS.get(alg.lower())
            if element and value:
                self.leaf(element, value)
        return self

    def owner(self, owner_id: str, display_name: str | None, tag: str = "Owner") -> XmlWriter:
        self.open(tag).leaf("ID", owner_id).leaf("DisplayName", display_name).close()
        return self

    def __bytes__(self) -> bytes:
        closing = [f"</{name}>" for name in reversed(self._stack)]
        return "".join(self._parts + closing).encode("utf-8")


def _empty_document(root: str) -> bytes:
    return f'{XML_DECL}<{root} xmlns="{NS}"/>'.encode()


# --------------------------------------------------------------------------------------------
# hardened parsing


def _refuse(*_args: object) -> Any:
    raise S3Error("MalformedXML", "DOCTYPE and ENTITY declarations are not allowed.")


def parse_xml(body: bytes | str) -> ET.Element:
    """Parse a request body into an Element tree whose tags have no namespace.

    MalformedXML for empty or ill-formed bodies and for any DOCTYPE/ENTITY declaration or
    external entity reference. Text of leaf elements is kept as parsed (character references
    such as `&#34;` are decoded by the parser)."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    if not body.strip():
        raise S3Error("MalformedXML")
    builder = ET.TreeBuilder()
    parser = xml.parsers.expat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse
    parser.EntityDeclHandler = _refuse
    parser.UnparsedEntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse
    parser.NotationDeclHandler = _refuse

    depth = [0]

    def start(name: str, attrs: dict[str, str]) -> None:
        depth[0] += 1
        if depth[0] > MAX_XML_DEPTH:
            raise S3Error("MalformedXML", "The XML document is nested too deeply.")
        builder.start(name.rsplit("}", 1)[-1], {k.rsplit("}", 1)[-1]: v for k, v in attrs.items()})

    def end(name: str) -> None:
        depth[0] -= 1
        builder.end(name.rsplit("}", 1)[-1])

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = builder.data
    parser.buffer_text = True
    try:
        parser.Parse(body, True)
        return builder.close()
    except S3Error:
        raise
    except (xml.parsers.expat.ExpatError, ValueError, AssertionError) as exc:
        raise S3Error("MalformedXML") from exc


def _root(body: bytes | str, name: str) -> ET.Element:
    root = parse_xml(body)
    if root.tag != name:
        raise S3Error("MalformedXML", f"Expected a {name} document, got {root.tag}.")
    return root


def child_text(element: ET.Element, name: str) -> str | None:
    """Text of the first child called `name` ("" if empty), None if there is no such child."""
    child = element.find(name)
    if child is None:
        return None
    return child.text or ""


# --------------------------------------------------------------------------------------------
# access control


def parse_acl_grants(body: bytes | str) -> list[tuple[str | None, str]]:
    """(grantee canonical ID, or None for a group or e-mail grantee; permission) of each
    Grant in an AccessControlPolicy; MalformedXML if it is not one."""
    root = _root(body, "AccessControlPolicy")
    grants: list[tuple[str | None, str]] = []
    for grant in root.iter("Grant"):
        grantee = grant.find("Grantee")
        grantee_id = child_text(grantee, "ID") if grantee is not None else None
        permission = (child_text(grant, "Permission") or "").strip()
        if grantee is None or not permission:
            raise S3Error("MalformedXML", "Each Grant needs a Grantee and a Permission.")
        grants.append((grantee_id.strip() if grantee_id else None, permission))
    return grants


def parse_ownership_controls(body: bytes | str) -> str:
    """The ObjectOwnership of an OwnershipControls document (one Rule)."""
    root = _root(body, "OwnershipControls")
    rules = root.findall("Rule")
    ownership = child_text(rules[0], "ObjectOwnership") if len(rules) == 1 else None
    if not ownership or not ownership.strip():
        raise S3Error("MalformedXML", "OwnershipControls needs exactly one Rule with an ObjectOwnership.")
    return ownership.strip()


def ownership_controls_xml(ownership: str) -> bytes:
    w = XmlWriter("OwnershipControls").open("Rule").leaf("ObjectOwnership", ownership)
    return bytes(w)


# --------------------------------------------------------------------------------------------
# errors, buckets


def error_xml(err: S3Error, request_id: str, host_id: str = "") -> bytes:
    """`<Error>` body for `err` (no namespace, as AWS)."""
    w = XmlWriter("Error", namespace=False)
    w.leaf("Code", err.code).leaf("Message", err.message)
    for name, value in err.extra.items():
        w.leaf(name, value)
    w.leaf("Resource", err.resource).leaf("RequestId", request_id)
    if host_id:
        w.leaf("HostId", host_id)
    return bytes(w)


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def list_buckets_xml(
    buckets: Iterable[Any],
    owner_id: str,
    owner_name: str,
    *,
    region: str | None = None,
    prefix: str | None = None,
    continuation_token: str | None = None,
) -> bytes:
    """ListAllMyBucketsResult; buckets are `Bucket` records or dicts with name and created.
    `continuation_token` is the next page's (only when there is one); `prefix` is echoed."""
    w = XmlWriter("ListAllMyBucketsResult")
    w.owner(owner_id, owner_name)
    w.open("Buckets")
    for bucket in buckets:
        w.open("Bucket").leaf("Name", _field(bucket, "name"))
        w.leaf("CreationDate", iso8601(_field(bucket, "created")))
        if region is not None:
            w.leaf("BucketRegion", region)
        w.close()
    w.close()
    if continuation_token is not None:
        w.leaf("ContinuationToken", continuation_token)
    if prefix is not None:
        w.leaf("Prefix", prefix)
    return bytes(w)


def location_xml(location: str | None) -> bytes:
    """GetBucketLocation: an empty `<LocationConstraint/>` for us-east-1 (or no location)."""
    if not location or location == "us-east-1":
        return _empty_document("LocationConstraint")
    return f'{XML_DECL}<LocationConstraint xmlns="{NS}">{xml_text(location)}</LocationConstraint>'.encode()


def parse_create_bucket(body: bytes | str) -> str | None:
    """The LocationConstraint of a CreateBucket body; None for an empty body or none given."""
    if not body or not body.strip():
        return None
    root = _root(body, "CreateBucketConfiguration")
    location = child_text(root, "LocationConstraint")
    return location.strip() if location and location.strip() else None


def versioning_xml(status: str) -> bytes:
    """GetBucketVersioning: empty element for a never-versioned bucket."""
    if not status:
        return _empty_document("VersioningConfiguration")
    return bytes(XmlWriter("VersioningConfiguration").leaf("Status", status))


def parse_versioning(body: bytes | str) -> str:
    """`Enabled` or `Suspended`; IllegalVersioningConfigurationException otherwise.

    MFA delete cannot be enabled (we have no MFA devices): NotImplemented. Its element is
    matched in any case: the MinIO SDKs write `MFADelete`, AWS documents `MfaDelete`, and
    an MFA delete asked for must never be dropped unnoticed. Any other element is
    MalformedXML (it does not validate against S3's schema), and nothing changes."""
    root = _root(body, "VersioningConfiguration")
    mfa = ""
    for child in root:
        if child.tag.lower() == "mfadelete":
            mfa = (child.text or "").strip()
        elif child.tag != "Status":
            raise S3Error("MalformedXML", f"VersioningConfiguration has no element {child.tag}.")
    if mfa not in ("", "Disabled"):
        if mfa == "Enabled":
            raise S3Error("NotImplemented", "MFA delete is not supported.")
        raise S3Error("IllegalVersioningConfigurationException")
    status = (child_text(root, "Status") or "").strip()
    if status not in ("Enabled", "Suspended"):
        raise S3Error("IllegalVersioningConfigurationException")
    return status


# --------------------------------------------------------------------------------------------
# multipart upload


@dataclass
class CompletedPart:
    """One `<Part>` of a CompleteMultipartUpload body (ETag without quotes)."""

    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)


def initiate_upload_xml(bucket: str, key: str, upload_id: str) -> bytes:
    w = XmlWriter("InitiateMultipartUploadResult")
    w.leaf("Bucket", bucket).leaf("Key", key).leaf("UploadId", upload_id)
    return bytes(w)


def parse_complete_upload(body: bytes | str) -> list[CompletedPart]:
    """The parts of a CompleteMultipartUpload body, validated here:

    - no parts, a Part without PartNumber or ETag, a non-integer PartNumber → MalformedXML;
    - a PartNumber outside 1..10000 → InvalidArgument;
    - part numbers not strictly ascending (duplicates included) → InvalidPartOrder.
    The caller checks that each part exists and matches (InvalidPart) and sizes
    (EntityTooSmall)."""
    root = _root(body, "CompleteMultipartUpload")
    parts: list[CompletedPart] = []
    for part in root.findall("Part"):
        number_text = child_text(part, "PartNumber")
        etag = child_text(part, "ETag")
        if number_text is None or etag is None:
            raise S3Error("MalformedXML", "Each Part needs a PartNumber and an ETag.")
        try:
            number = int(number_text.strip())
        except ValueError as exc:
            raise S3Error("MalformedXML", "PartNumber must be an integer.") from exc
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error(
                "InvalidArgument",
                "Part number must be an integer between 1 and 10000, inclusive",
                extra={"ArgumentName": "partNumber", "ArgumentValue": str(number)},
            )
        checksums = {
            _CHECKSUM_BY_ELEMENT[child.tag]: (child.text or "").strip()
            for child in part
            if child.tag in _CHECKSUM_BY_ELEMENT and (child.text or "").strip()
        }
        if parts and number <= parts[-1].part_number:
            raise S3Error("InvalidPartOrder")
        parts.append(CompletedPart(number, unquote_etag(etag), checksums))
    if not parts:
        raise S3Error("MalformedXML", "A CompleteMultipartUpload needs at least one Part.")
    return parts


def complete_upload_xml(
    location: str,
    bucket: str,
    key: str,
    etag: str,
    checksums: dict[str, str] | None = None,
    checksum_type: str | None = None,
) -> bytes:
    w = XmlWriter("CompleteMultipartUploadResult")
    w.leaf("Location", location).leaf("Bucket", bucket).leaf("Key", key)
    w.leaf("ETag", quote_etag(etag)).checksums(checksums).leaf("ChecksumType", checksum_type)
    return bytes(w)


def list_parts_xml(
    *,
    bucket: str,
    key: str,
    upload_id: str,
    parts: Sequence[dict[str, Any]],
    part_number_marker: int,
    next_part_number_marker: int | None,
    max_parts: int,
    is_truncated: bool,
    owner_id: str = "",
    owner_name: str = "",
    storage_class: str = "STANDARD",
    checksum_algorithm: str | None = None,
    checksum_type: str | None = None,
) -> bytes:
    """ListPartsResult; parts are store part dicts (partNumber, etag, size, lastModified,
    checksums). `checksum_type` is the upload's (rendered only when given: a CRC32 upload's
    may be either)."""
    w = XmlWriter("ListPartsResult")
    w.leaf("Bucket", bucket).leaf("Key", key).leaf("UploadId", upload_id)
    w.owner(owner_id, owner_name, "Initiator").owner(owner_id, owner_name)
    w.leaf("StorageClass", storage_class)
    w.leaf("PartNumberMarker", part_number_marker)
    w.leaf("NextPartNumberMarker", next_part_number_marker)
    w.leaf("MaxParts", max_parts).leaf("IsTruncated", is_truncated)
    if checksum_algorithm:
        w.leaf("ChecksumAlgorithm", checksum_algorithm.upper())
        w.leaf("ChecksumType", checksum_type)
    for part in parts:
        w.open("Part").leaf("PartNumber", part["partNumber"])
        w.leaf("LastModified", iso8601(part.get("lastModified", 0)))
        w.leaf("ETag", quote_etag(part["etag"])).leaf("Size", part.get("size", 0))
        w.checksums(part.get("checksums")).close()
    return bytes(w)


def list_uploads_xml(
    *,
    bucket: str,
    uploads: Sequence[dict[str, Any]],
    common_prefixes: Sequence[str],
    prefix: str,
    delimiter: str,
    key_marker: str,
    upload_id_marker: str,
    next_key_marker: str | None,
    next_upload_id_marker: str | None,
    max_uploads: int,
    is_truncated: bool,
    encode: bool,
    owner_id: str = "",
    owner_name: str = "",
) -> bytes:
    """ListMultipartUploadsResult; uploads are store upload dicts (uploadId, key, initiated,
    meta). With `encode`, keys, prefixes, delimiter and markers are URL-encoded."""
    enc = url_encode if encode else _identity
    w = XmlWriter("ListMultipartUploadsResult")
    w.leaf("Bucket", bucket).leaf("KeyMarker", enc(key_marker))
    w.leaf("UploadIdMarker", upload_id_marker)
    w.leaf("NextKeyMarker", None if next_key_marker is None else enc(next_key_marker))
    w.leaf("NextUploadIdMarker", next_upload_id_marker)
    if encode:
        w.leaf("EncodingType", "url")
    w.leaf("Prefix", enc(prefix))
    if delimiter:
        w.leaf("Delimiter", enc(delimiter))
    w.leaf("MaxUploads", max_uploads).leaf("IsTruncated", is_truncated)
    for upload in uploads:
        meta = upload.get("meta") or {}
        w.open("Upload").leaf("Key", enc(upload["key"])).leaf("UploadId", upload["uploadId"])
        # uploads made before their meta carried the initiator have it at the top level
        uid = meta.get("owner") or upload.get("owner") or owner_id
        uname = meta.get("ownerDisplayName") or owner_name or uid
        w.owner(uid, uname, "Initiator").owner(uid, uname)
        w.leaf("StorageClass", storage_class(meta))
        w.leaf("Initiated", iso8601(upload.get("initiated", 0)))
        if algorithm := meta.get("checksumAlgorithm"):
            w.leaf("ChecksumAlgorithm", str(algorithm).upper())
            # uploads made before their type was kept have their algorithm's default
            w.leaf("ChecksumType", meta.get("checksumType") or default_type(str(algorithm)))
        w.close()
    for cp in common_prefixes:
        w.open("CommonPrefixes").leaf("Prefix", enc(cp)).close()
    return bytes(w)


def post_response_xml(location: str, bucket: str, key: str, etag: str) -> bytes:
    """POST Object's answer to `success_action_status=201` (no namespace, as S3 sends it)."""
    w = XmlWriter("PostResponse", namespace=False)
    w.leaf("Location", location).leaf("Bucket", bucket).leaf("Key", key)
    return bytes(w.leaf("ETag", quote_etag(etag)))


def copy_object_result_xml(
    etag: str, last_modified: str | dt.datetime | float, checksums: dict[str, str] | None = None
) -> bytes:
    w = XmlWriter("CopyObjectResult")
    w.leaf("ETag", quote_etag(etag)).leaf("LastModified", iso8601(last_modified))
    return bytes(w.checksums(checksums))


def copy_part_result_xml(
    etag: str, last_modified: str | dt.datetime | float, checksums: dict[str, str] | None = None
) -> bytes:
    w = XmlWriter("CopyPartResult")
    w.leaf("ETag", quote_etag(etag)).leaf("LastModified", iso8601(last_modified))
    return bytes(w.checksums(checksums))


# --------------------------------------------------------------------------------------------
# DeleteObjects


@dataclass(frozen=True)
class DeleteTarget:
    """One `<Object>` of a DeleteObjects request. `etag`, `size` and `last_modified` (UTC)
    make its delete conditional: the version it removes must match each one given."""

    key: str
    version_id: str | None = None
    etag: str | None = None
    size: int | None = None
    last_modified: dt.datetime | None = None


@dataclass
class DeletedObject:
    """One `<Deleted>` entry of a DeleteObjects result."""

    key: str
    version_id: str | None = None
    delete_marker: bool = False
    delete_marker_version_id: str | None = None


@dataclass
class DeleteError:
    """One `<Error>` entry of a DeleteObjects result."""

    key: str
    code: str
    message: str
    version_id: str | None = None


def _timestamp(text: str) -> dt.datetime:
    """A timestamp in a request document: the HTTP date the SDKs write there (botocore does,
    for DeleteObjects' LastModifiedTime), or ISO 8601. ValueError if neither."""
    moment = parse_http_date(text)
    return moment if moment is not None else _utc(dt.datetime.fromisoformat(text))


def parse_delete_objects(body: bytes | str) -> tuple[bool, list[DeleteTarget]]:
    """(quiet, targets) of a Delete body.

    No objects, more than 1000, an Object without Key, or a Quiet that is not a boolean →
    MalformedXML. Empty keys and empty version ids are kept (the caller reports them per
    key)."""
    root = _root(body, "Delete")
    quiet_text = (child_text(root, "Quiet") or "false").strip().lower()
    if quiet_text not in ("true", "false"):
        raise S3Error("MalformedXML", "Quiet must be true or false.")
    objects: list[DeleteTarget] = []
    for obj in root.findall("Object"):
        key = child_text(obj, "Key")
        if key is None:
            raise S3Error("MalformedXML", "Each Object needs a Key.")
        etag, size, modified = (
            (child_text(obj, name) or "").strip() or None
            for name in ("ETag", "Size", "LastModifiedTime")
        )
        # an empty VersionId names the version "", which AWS reports as not there: it is
        # not the absence of one (which would make a delete marker)
        version_id = child_text(obj, "VersionId")
        version_id = None if version_id is None else version_id.strip()
        try:
            objects.append(DeleteTarget(
                key, version_id, etag,
                int(size) if size is not None else None,
                _timestamp(modified) if modified is not None else None,
            ))
        except ValueError:
            raise S3Error("MalformedXML", f"Object {key!r}: Size must be an integer and "
                          "LastModifiedTime an HTTP date or an ISO 8601 timestamp.") from None
        if len(objects) > MAX_DELETE_OBJECTS:
            raise S3Error("MalformedXML", "A Delete request may name at most 1000 objects.")
    if not objects:
        raise S3Error("MalformedXML", "A Delete request must name at least one object.")
    return quiet_text == "true", objects


def delete_result_xml(deleted: Iterable[DeletedObject], errors: Iterable[DeleteError]) -> bytes:
    """DeleteResult. In quiet mode the caller passes no `deleted` entries."""
    w = XmlWriter("DeleteResult")
    for d in deleted:
        w.open("Deleted").leaf("Key", d.key).leaf("VersionId", d.version_id)
        if d.delete_marker:
            w.leaf("DeleteMarker", True)
            w.leaf("DeleteMarkerVersionId", d.delete_marker_version_id)
        w.close()
    for e in errors:
        w.open("Error").leaf("Key", e.key).leaf("VersionId", e.version_id)
        w.leaf("Code", e.code).leaf("Message", e.message).close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# tagging


def validate_tags(
    tags: Sequence[tuple[str, str]], *, max_tags: int = MAX_OBJECT_TAGS
) -> dict[str, str]:
    """Check tags against the AWS limits and return them as a dict; InvalidTag otherwise.

    At most `max_tags` (10 for objects, 50 for buckets); keys 1..128 characters, values
    0..256; unique keys; no `aws:` prefix; letters, digits, spaces and `+ - = . _ : / @`."""
    if len(tags) > max_tags:
        if max_tags == MAX_OBJECT_TAGS:  # AWS's code and words for an object's tag set
            raise S3Error("BadRequest", f"Object tags cannot be greater than {max_tags}")
        raise S3Error("InvalidTag", f"Bucket tag count cannot be greater than {max_tags}")
    result: dict[str, str] = {}
    for key, value in tags:
        if not key or len(key) > MAX_TAG_KEY:
            raise S3Error("InvalidTag", "The TagKey you have provided is too long or empty.")
        if len(value) > MAX_TAG_VALUE:
            raise S3Error("InvalidTag", "The TagValue you have provided is too long.")
        if key.lower().startswith("aws:"):
            raise S3Error("InvalidTag", "Your TagKey cannot be prefixed with aws:")
        if not _TAG_CHARS.match(key):
            raise S3Error("InvalidTag", "The TagKey you have provided is invalid")
        if not _TAG_CHARS.match(value):
            raise S3Error("InvalidTag", "The TagValue you have provided is invalid")
        if key in result:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key")
        result[key] = value
    return result


def parse_tagging(body: bytes | str, *, max_tags: int = MAX_OBJECT_TAGS) -> dict[str, str]:
    """The TagSet of a Tagging body, validated by `validate_tags`. A Tag without Key or Value
    → MalformedXML."""
    root = _root(body, "Tagging")
    tag_set = root.find("TagSet")
    if tag_set is None:
        raise S3Error("MalformedXML", "Tagging needs a TagSet.")
    pairs: list[tuple[str, str]] = []
    for tag in tag_set.findall("Tag"):
        key = child_text(tag, "Key")
        value = child_text(tag, "Value")
        if key is None or value is None:
            raise S3Error("MalformedXML", "Each Tag needs a Key and a Value.")
        pairs.append((key, value))
    return validate_tags(pairs, max_tags=max_tags)


def parse_tagging_header(value: str | None, *, max_tags: int = MAX_OBJECT_TAGS) -> dict[str, str]:
    """The `x-amz-tagging` header (a URL query string `k1=v1&k2=v2`), validated as above;
    no header or an empty one is no tags. A name without `=` is a tag with an empty value,
    as S3 takes it (`a=1&b`: b is ""); percent-escapes must decode as UTF-8."""
    if not value:
        return {}
    try:
        pairs = parse_qsl(value, keep_blank_values=True, errors="strict")
    except ValueError as exc:
        raise S3Error(
            "InvalidArgument",
            "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.",
        ) from exc
    return validate_tags(pairs, max_tags=max_tags)


def tagging_xml(tags: dict[str, str]) -> bytes:
    w = XmlWriter("Tagging").open("TagSet")
    for key, value in tags.items():
        w.open("Tag").leaf("Key", key).leaf("Value", value).close()
    return bytes(w.close())


# --------------------------------------------------------------------------------------------
# listing helpers (used by crossbeat.s3.listing)


def url_encode(value: str) -> str:
    """encoding-type=url: percent-encode everything but unreserved characters and `/`
    (so `+` becomes %2B and a space %20; botocore decodes with unquote_plus)."""
    return quote(value, safe="/")


def _identity(value: str) -> str:
    return value
