"""Bucket handlers: create/head/delete/list, versioning, replication, notification, lifecycle
and CORS configs."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import BucketExists, BucketNotEmpty, NoSuchBucket
from crossbeat.s3 import (
    acl,
    cors_config,
    lifecycle_config,
    listing,
    notification_config,
    replication_config,
    xmldoc,
)
from crossbeat.s3.auth import Principal
from crossbeat.s3.datapath import read_document
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response, xml_response
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.objectmeta import require_checksum

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{datetime.now(UTC).microsecond // 1000:03d}Z"


# Prefixes and suffixes AWS's general purpose bucket naming rules reserve (for punycode
# names, its own use, documentation examples, access point and Multi-Region Access Point
# aliases, directory and table buckets): S3 refuses to create a bucket named with one.
# `sthree-` covers the `sthree-configurator` AWS also lists.
_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def validate_bucket_name(name: str) -> None:
    """InvalidBucketName unless `name` may name a new bucket by AWS's general purpose bucket
    naming rules: 3 to 63 lower-case letters, digits, dots and hyphens, beginning and ending
    with a letter or digit, no `..`, not an IP address, no reserved prefix or suffix (plus
    no `.-` or `-.`, which crossbeat has always refused). Checked on CreateBucket only, so a
    bucket that exists keeps being served whatever its name."""
    bad = not BUCKET_RE.match(name) or ".." in name or ".-" in name or "-." in name
    if not bad:
        try:
            ipaddress.ip_address(name)
            bad = True
        except ValueError:
            pass
    if bad or name.startswith(_RESERVED_PREFIXES) or name.endswith(_RESERVED_SUFFIXES):
        raise S3Error("InvalidBucketName", resource=f"/{name}", extra={"BucketName": name})


MAX_BUCKETS = 10_000


async def list_buckets(gw: Gateway, req: Request, p: Principal) -> Response:
    """The caller's buckets by name, filtered by `prefix` and `bucket-region`, paged by
    `max-buckets` (1..10000; all when absent) and `continuation-token`, as on AWS."""
    q = req.query
    prefix = q.get("prefix", "")
    region = q.get("bucket-region")
    max_buckets = MAX_BUCKETS
    raw = q.get("max-buckets")
    if raw is not None:
        number = ascii_int(raw)
        if number is None or not 1 <= number <= MAX_BUCKETS:
            raise S3Error("InvalidArgument", f"max-buckets must be an integer from 1 to {MAX_BUCKETS}",
                          extra={"ArgumentName": "max-buckets", "ArgumentValue": raw})
        max_buckets = number
    token = q.get("continuation-token")
    after = listing.decode_token(token) if token is not None else None
    all_buckets = await gw.run(gw.store.list_buckets)
    mine = sorted(
        (b for b in all_buckets
         if b.owner == p.access_key and b.name.startswith(prefix)
         and (after is None or b.name > after) and region in (None, gw.settings.region)),
        key=lambda b: b.name,
    )
    page = mine[:max_buckets]
    next_token = listing.encode_token(page[-1].name) if len(mine) > max_buckets else None
    return xml_response(xmldoc.list_buckets_xml(
        page, p.access_key, p.display_name, region=gw.settings.region,
        prefix=q.get("prefix"), continuation_token=next_token,
    ))


# the region where S3 answers a CreateBucket of a bucket one already owns with 200 OK
LEGACY_REGION = "us-east-1"


async def create_bucket(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    validate_bucket_name(req.bucket)
    body = await read_document(req, ctx)
    constraint = xmldoc.parse_create_bucket(body) if body.strip() else None
    location = gw.location_name(constraint)
    acl.refuse_acl_headers(req.headers, creating_bucket=True)
    ownership = req.headers.get("x-amz-object-ownership")
    if ownership is not None and ownership.strip() != acl.ENFORCED:
        raise S3Error("NotImplemented", f"Only {acl.ENFORCED} object ownership is supported: "
                      "crossbeat has no ACLs; the bucket was not created.")
    if req.headers.get("x-amz-bucket-object-lock-enabled", "").lower() == "true":
        # a bucket without the protection asked for would be worse than none
        raise S3Error("NotImplemented", "Object Lock is not implemented by crossbeat; the bucket was not created.")
    bucket = Bucket(name=req.bucket, owner=p.access_key, location=location, created=now_iso())
    try:
        await gw.run(gw.store.create_bucket, bucket)
    except BucketExists as exc:
        existing = exc.existing
        if existing is not None and existing.owner == p.access_key:
            if gw.settings.region == LEGACY_REGION and existing.location == location:
                # AWS in us-east-1, "for legacy compatibility": 200 OK, the bucket untouched
                return Response(headers={"location": f"/{req.bucket}"})
            raise S3Error("BucketAlreadyOwnedByYou", resource=f"/{req.bucket}") from exc
        raise S3Error("BucketAlreadyExists", resource=f"/{req.bucket}") from exc
    return Response(headers={"location": f"/{req.bucket}"})


async def head_bucket(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p, fresh=True)
    return Response(headers={"x-amz-bucket-region": gw.settings.region})


async def delete_bucket(gw: Gateway, req: Request, p: Principal) -> Response:
    await gw.bucket(req.bucket, p, fresh=True)
    gw.forget_bucket(req.bucket)
    try:
        # open multipart uploads go with it, as on S3 (their parts' data is freed below)
        parts = await gw.run(gw.store.delete_bucket, req.bucket)
    except BucketNotEmpty as exc:
        raise S3Error("BucketNotEmpty", resource=f"/{req.bucket}", extra={"BucketName": req.bucket}) from exc
    except NoSuchBucket as exc:
        raise S3Error("NoSuchBucket", resource=f"/{req.bucket}") from exc
    finally:
        gw.forget_bucket(req.bucket)
    await gw.free(parts)
    return Response(status=204)


async def list_objects(gw: Gateway, req: Request, p: Principal, v2: bool) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    body = await gw.run(
        partial(listing.list_objects, owner=(p.access_key, p.display_name)), gw.store, bucket, req.query, v2
    )
    return xml_response(body)


async def list_versions(gw: Gateway, req: Request, p: Principal) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    body = await gw.run(
        partial(listing.list_object_versions, owner=(p.access_key, p.display_name)), gw.store, bucket, req.query
    )
    return xml_response(body)


async def put_versioning(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    status = xmldoc.parse_versioning(await read_document(req, ctx))
    if status == "Suspended" and bucket.replication:
        raise S3Error(
            "InvalidBucketState",
            "Replication configuration is present: versioning cannot be suspended.",
            status=409,
        )
    await gw.run(gw.store.update_bucket, req.bucket, versioning=status)
    gw.forget_bucket(req.bucket)
    return Response()


async def put_replication(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    config = replication_config.parse_replication(await read_document(req, ctx), bucket.versioning,
                                                  gw.settings.replication_sites)
    await gw.run(gw.store.update_bucket, req.bucket, replication=config)
    gw.forget_bucket(req.bucket)
    return Response()


async def put_notification(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    await gw.bucket(req.bucket, p, fresh=True)
    config = notification_config.parse_notification(await read_document(req, ctx))
    await gw.run(gw.store.update_bucket, req.bucket, notification=config or None)
    gw.forget_bucket(req.bucket)
    return Response()


async def put_lifecycle(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    """PutBucketLifecycleConfiguration (and the legacy PutBucketLifecycle, the same request
    with rule-level Prefixes): replaces the whole configuration; the lifecycle pass
    (s3/lifecycle.py) applies it."""
    await gw.bucket(req.bucket, p, fresh=True)
    require_checksum(req.headers)
    size_default = lifecycle_config.transition_size_default(req.headers)
    config = lifecycle_config.parse_lifecycle(await read_document(req, ctx))
    config["transitionDefaultMinimumObjectSize"] = size_default
    await gw.run(gw.store.update_bucket, req.bucket, lifecycle=config)
    gw.forget_bucket(req.bucket)
    return Response(headers={lifecycle_config.TRANSITION_SIZE_HEADER: size_default})


async def put_cors(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    """PutBucketCors: replaces the whole configuration. AWS requires Content-MD5 or a
    flexible checksum, and a document of at most 64 KB. s3/cors.py applies it; other
    gateway processes do within `gateway.RECENT_BUCKET_TTL_S` (see `Gateway.cors_of`)."""
    await gw.bucket(req.bucket, p, fresh=True)
    require_checksum(req.headers)
    body = await read_document(req, ctx, limit=cors_config.MAX_DOCUMENT_BYTES)
    config = cors_config.parse_cors(body)
    await gw.run(gw.store.update_bucket, req.bucket, cors=config)
    gw.forget_bucket(req.bucket)
    return Response()


async def put_tagging(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    tags = xmldoc.parse_tagging(await read_document(req, ctx), max_tags=50)
    attrs = dict(bucket.attrs)
    attrs["tags"] = tags
    await gw.run(gw.store.update_bucket, req.bucket, attrs=attrs)
    gw.forget_bucket(req.bucket)
    return Response(status=204)


async def put_acl(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    """PutBucketAcl: only an ACL that grants the owner alone (see s3/acl.py); a no-op."""
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    acl.refuse_acl_headers(req.headers)
    acl.refuse_acl_document(await read_document(req, ctx), bucket.owner)
    return Response()


async def put_ownership_controls(gw: Gateway, req: Request, p: Principal, ctx: Any) -> Response:
    """PutBucketOwnershipControls: BucketOwnerEnforced, what every bucket has, is a no-op."""
    await gw.bucket(req.bucket, p, fresh=True)
    acl.check_ownership_controls(await read_document(req, ctx))
    return Response()


def acl_xml(owner_id: str, owner_name: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<AccessControlPolicy xmlns="{XMLNS}"><Owner><ID>{owner_id}</ID>'
        f"<DisplayName>{owner_name}</DisplayName></Owner><AccessControlList><Grant>"
        '<Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser">'
        f"<ID>{owner_id}</ID><DisplayName>{owner_name}</DisplayName></Grantee>"
        "<Permission>FULL_CONTROL</Permission></Grant></AccessControlList></AccessControlPolicy>"
    ).encode()


NOT_CONFIGURED = {
    "policy": ("NoSuchBucketPolicy", "The bucket policy does not exist"),
    "object-lock": ("ObjectLockConfigurationNotFoundError", "Object Lock configuration does not exist for this bucket"),
    "lifecycle": ("NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist"),
    "cors": ("NoSuchCORSConfiguration", "The CORS configuration does not exist"),
    "encryption": ("ServerSideEncryptionConfigurationNotFoundError", "The server side encryption configuration was not found"),
    "website": ("NoSuchWebsiteConfiguration", "The specified bucket does not have a website configuration"),
    "publicAccessBlock": ("NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found"),
}


async def get_sub(gw: Gateway, req: Request, p: Principal, sub: str) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    if sub == "versioning":
        return xml_response(xmldoc.versioning_xml(bucket.versioning))
    if sub == "location":
        name = "" if bucket.location == gw.settings.default_location else bucket.location
        if not name and gw.settings.region != "us-east-1":
            name = gw.settings.region
        return xml_response(xmldoc.location_xml(name))
    if sub == "replication":
        if not bucket.replication:
            raise S3Error("ReplicationConfigurationNotFoundError", resource=f"/{req.bucket}", extra={"BucketName": req.bucket})
        return xml_response(replication_config.replication_xml(bucket.replication))
    if sub == "notification":
        return xml_response(notification_config.notification_xml(bucket.notification or {}))
    if sub == "lifecycle" and bucket.lifecycle:
        # AWS names the transition size default on every answer; crossbeat has no transitions
        size_default = bucket.lifecycle.get("transitionDefaultMinimumObjectSize")
        return xml_response(
            lifecycle_config.lifecycle_xml(bucket.lifecycle),
            headers={lifecycle_config.TRANSITION_SIZE_HEADER:
                     size_default or lifecycle_config.TRANSITION_SIZE_DEFAULTS[0]},
        )
    if sub == "cors" and bucket.cors:
        return xml_response(cors_config.cors_xml(bucket.cors))
    if sub == "tagging":
        tags = bucket.attrs.get("tags")
        if not tags:
            raise S3Error("NoSuchTagSet", resource=f"/{req.bucket}")
        return xml_response(xmldoc.tagging_xml(tags))
    if sub == "acl":
        return xml_response(acl_xml(p.access_key, p.display_name))
    if sub == "ownershipControls":
        return xml_response(xmldoc.ownership_controls_xml(acl.ENFORCED))
    if sub == "logging":
        return xml_response(f'<?xml version="1.0" encoding="UTF-8"?><BucketLoggingStatus xmlns="{XMLNS}"/>'.encode())
    if sub == "requestPayment":
        return xml_response(f'<?xml version="1.0" encoding="UTF-8"?><RequestPaymentConfiguration xmlns="{XMLNS}"><Payer>BucketOwner</Payer></RequestPaymentConfiguration>'.encode())
    if sub == "accelerate":
        return xml_response(f'<?xml version="1.0" encoding="UTF-8"?><AccelerateConfiguration xmlns="{XMLNS}"/>'.encode())
    code, message = NOT_CONFIGURED[sub]
    raise S3Error(code, message, status=404, resource=f"/{req.bucket}", extra={"BucketName": req.bucket})


async def delete_sub(gw: Gateway, req: Request, p: Principal, sub: str) -> Response:
    bucket = await gw.bucket(req.bucket, p, fresh=True)
    if sub == "replication":
        await gw.run(gw.store.update_bucket, req.bucket, replication=None)
    elif sub == "notification":
        await gw.run(gw.store.update_bucket, req.bucket, notification=None)
    elif sub == "lifecycle":
        if bucket.lifecycle is not None:  # no journal entry for deleting what is not there
            await gw.run(gw.store.update_bucket, req.bucket, lifecycle=None)
    elif sub == "cors":
        if bucket.cors is not None:
            await gw.run(gw.store.update_bucket, req.bucket, cors=None)
    elif sub == "tagging":
        attrs = dict(bucket.attrs)
        attrs.pop("tags", None)
        await gw.run(gw.store.update_bucket, req.bucket, attrs=attrs)
    gw.forget_bucket(req.bucket)
    return Response(status=204)
