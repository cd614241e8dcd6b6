"""GetObjectAttributes (`GET /{bucket}/{key}?attributes`): what HeadObject and ListParts
tell of a version, in one request and without its data.

`x-amz-object-attributes` names what to return, comma-separated, from ETag, Checksum,
ObjectParts, StorageClass and ObjectSize; a missing or unknown name is InvalidArgument.
As in S3:
- the ETag is unquoted;
- Checksum carries the stored checksum and its type; a COMPOSITE value is given without
  the `-N` part count that HeadObject shows;
- ObjectParts is present only for an object made by a multipart upload: its part count and,
  when the object has an additional checksum, the parts after `x-amz-part-number-marker`, at
  most `x-amz-max-parts` (default 1000), each with its size and its checksum. Without one
  (s3cmd's and rclone's uploads, say) S3 gives the part count alone;
- a delete marker is NoSuchKey (MethodNotAllowed when addressed by versionId) with
  `x-amz-delete-marker`, as for GET.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossbeat.s3 import xmldoc
from crossbeat.s3.auth import Principal
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.objectmeta import http_date, refuse_customer_key, storage_class
from crossbeat.s3.objects import lookup

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
MAX_PARTS = 1000


def requested(headers: dict[str, str]) -> set[str]:
    """The attribute names of `x-amz-object-attributes`; InvalidArgument if none or unknown."""
    names = {n.strip() for n in headers.get("x-amz-object-attributes", "").split(",") if n.strip()}
    if not names:
        raise S3Error("InvalidArgument", "The x-amz-object-attributes header specifying the "
                      "attributes to be retrieved is either missing or empty")
    unknown = sorted(names.difference(ATTRIBUTES))
    if unknown:
        raise S3Error("InvalidArgument", f"Invalid attribute name specified: {', '.join(unknown)}")
    return names


def _count(headers: dict[str, str], name: str, default: int, high: int) -> int:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise S3Error("InvalidArgument", f"{name} must be a non-negative integer")
    return min(value, high)


async def get_object_attributes(gw: Gateway, req: Request, p: Principal) -> Response:
    refuse_customer_key(req.headers)
    names = requested(req.headers)
    max_parts = _count(req.headers, "x-amz-max-parts", MAX_PARTS, MAX_PARTS)
    marker = _count(req.headers, "x-amz-part-number-marker", 0, 10_000)
    bucket = await gw.bucket(req.bucket, p)
    meta = await lookup(gw, req.bucket, req.key, req.query.get("versionId"))
    headers = {"last-modified": http_date(meta["lastModified"])}
    if bucket.versioning or meta["versionId"] != "null":
        headers["x-amz-version-id"] = meta["versionId"]
    return xml_response(attributes_xml(meta, names, max_parts, marker), headers=headers)


def attributes_xml(meta: dict[str, Any], names: set[str], max_parts: int, marker: int) -> bytes:
    w = xmldoc.XmlWriter("GetObjectAttributesResponse")
    if "ETag" in names:
        w.leaf("ETag", str(meta["etag"]).strip('"'))
    checksum = meta.get("checksum")
    if "Checksum" in names and checksum:
        value = str(checksum["value"])
        if checksum.get("type") == "COMPOSITE":
            value = value.partition("-")[0]
        w.open("Checksum").checksums({checksum["algorithm"].lower(): value})
        w.leaf("ChecksumType", checksum.get("type")).close()
    parts = meta.get("parts")
    if "ObjectParts" in names and parts:
        _object_parts(w, meta, [int(s) for s in parts], max_parts, marker)
    if "StorageClass" in names:
        w.leaf("StorageClass", storage_class(meta))
    if "ObjectSize" in names:
        w.leaf("ObjectSize", int(meta["size"]))
    return bytes(w.close())


def _object_parts(
    w: xmldoc.XmlWriter, meta: dict[str, Any], sizes: list[int], max_parts: int, marker: int
) -> None:
    algorithm = str((meta.get("checksum") or {}).get("algorithm") or "").lower()
    part_checksums = meta.get("partChecksums") or []
    w.open("ObjectParts").leaf("PartsCount", len(sizes))
    if not algorithm:
        # as S3: "if an additional checksum isn't applied to the object … the response
        # doesn't return the Part element"; it answers <PartsCount> alone
        w.close()
        return
    shown = list(enumerate(sizes, start=1))[marker:marker + max_parts]
    truncated = marker + len(shown) < len(sizes)
    w.leaf("PartNumberMarker", marker).leaf("MaxParts", max_parts).leaf("IsTruncated", truncated)
    if shown:
        w.leaf("NextPartNumberMarker", shown[-1][0])
    for number, size in shown:
        w.open("Part").leaf("PartNumber", number).leaf("Size", size)
        if len(part_checksums) == len(sizes):
            w.checksums({algorithm: part_checksums[number - 1]})
        w.close()
    w.close()
