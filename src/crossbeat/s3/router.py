"""Which handler serves a request: by method, bucket/key presence and sub-resource."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crossbeat.s3 import attributes, buckets, internal, multipart, objects
from crossbeat.s3.auth import Principal
from crossbeat.s3.errors import S3Error
from crossbeat.s3.http import Request, Response
from crossbeat.s3.version_check import check_version_id_arg

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

INTERNAL_PREFIX = "crossbeat/"

# Query parameters that name an S3 sub-resource (an API other than the plain bucket or object
# request). One the route below does not serve is refused with 501 NotImplemented: served as
# the plain request instead, `PUT ?legal-hold` would overwrite the object with the XML
# document and `DELETE ?cors` would delete the bucket. `events` is MinIO's
# ListenBucketNotification: answered with a listing, the MinIO SDKs' listeners re-asked in a
# tight loop (thousands of listings a second), where a 501 ends them with an error.
SUBRESOURCES = frozenset({
    "events",
    "accelerate", "acl", "analytics", "attributes", "cors", "delete", "encryption",
    "intelligent-tiering", "inventory", "legal-hold", "lifecycle", "location", "logging",
    "metadataConfiguration", "metadataInventoryTable", "metadataJournalTable", "metadataTable",
    "metrics", "notification", "object-lock", "ownershipControls", "policy", "policyStatus",
    "publicAccessBlock", "renameObject", "replication", "requestPayment", "restore",
    "retention", "select", "select-type", "session", "tagging", "torrent", "uploadId",
    "uploads", "versioning", "versions", "website",
})
_BUCKET_GET = ("versioning", "replication", "notification", "location", "tagging", "acl",
               "policy", "object-lock", "lifecycle", "cors", "encryption", "website",
               "ownershipControls", "publicAccessBlock", "logging", "requestPayment",
               "accelerate")
# Bucket configurations crossbeat never stores (GET answers "not configured"): deleting one
# is a no-op, as AWS's DELETE of an absent configuration is.
_BUCKET_DELETE_ABSENT = ("policy", "encryption", "website", "publicAccessBlock")
# What each (target, method) serves; anything else in SUBRESOURCES is NotImplemented.
_SERVED = {
    ("bucket", "PUT"): frozenset({"versioning", "replication", "notification", "tagging", "acl",
                                  "ownershipControls", "lifecycle", "cors"}),
    ("bucket", "GET"): frozenset({*_BUCKET_GET, "versions", "uploads"}),
    ("bucket", "DELETE"): frozenset({"replication", "tagging", "notification", "lifecycle", "cors",
                                     *_BUCKET_DELETE_ABSENT}),
    ("bucket", "POST"): frozenset({"delete"}),
    ("object", "PUT"): frozenset({"tagging", "acl", "uploadId"}),
    ("object", "GET"): frozenset({"tagging", "acl", "uploadId", "attributes"}),
    ("object", "DELETE"): frozenset({"tagging", "uploadId"}),
    ("object", "POST"): frozenset({"uploads", "uploadId"}),
}


def _refuse_unserved(target: str, method: str, q: dict[str, str]) -> None:
    if not q:
        return
    if method == "HEAD" and (selected := sorted(SUBRESOURCES.intersection(q))):
        # No sub-resource has a HEAD form: S3 answers 405, whether or not the bucket or key
        # exists, with an Allow naming the methods that sub-resource takes (here: those
        # crossbeat serves for it)
        allowed = sorted(m for (t, m), subs in _SERVED.items() if t == target and selected[0] in subs)
        raise S3Error("MethodNotAllowed", headers={"allow": ", ".join(allowed)} if allowed else None)
    unserved = sorted(SUBRESOURCES.intersection(q) - _SERVED.get((target, method), frozenset()))
    if unserved:
        raise S3Error(
            "NotImplemented",
            f"{method} on a {target} with ?{unserved[0]} is not implemented by crossbeat.",
        )


async def dispatch(gw: Gateway, req: Request, principal: Principal, ctx: Any) -> Response:
    q = req.query
    m = req.method
    if req.bucket == "_" and req.key.startswith(INTERNAL_PREFIX):
        if not principal.is_admin:
            raise S3Error("AccessDenied", "Internal routes need admin credentials.")
        return await internal.dispatch(gw, req, principal, ctx, req.key[len(INTERNAL_PREFIX):])
    if not req.bucket:
        if m in ("GET", "HEAD"):
            return await buckets.list_buckets(gw, req, principal)
        raise S3Error("MethodNotAllowed")
    _check_expected_owner(req, principal)
    if not req.key:
        _refuse_unserved("bucket", m, q)
        return await _bucket(gw, req, principal, ctx, m, q)
    if len(req.key.encode("utf-8", "surrogateescape")) > 1024:
        raise S3Error("KeyTooLongError")
    _refuse_unserved("object", m, q)
    if "versionId" in q:
        check_version_id_arg(q["versionId"])
    return await _object(gw, req, principal, ctx, m, q)


def _check_expected_owner(req: Request, principal: Principal) -> None:
    """`x-amz-expected-bucket-owner` (and `x-amz-source-expected-bucket-owner`, a copy's
    source): AccessDenied unless it names the bucket's owner, as on S3. A bucket here is
    reached only by its owner, whose account id is its access key (the Owner ID that
    ListBuckets and GetBucketAcl show), so the request's principal is that owner."""
    for name in ("x-amz-expected-bucket-owner", "x-amz-source-expected-bucket-owner"):
        expected = req.headers.get(name)
        if expected is not None and expected != principal.access_key:
            raise S3Error("AccessDenied", f"The bucket is not owned by the account {name} names.")


async def _bucket(gw: Gateway, req: Request, p: Principal, ctx: Any, m: str, q: dict[str, str]) -> Response:
    if m == "PUT":
        for sub in ("versioning", "replication", "notification", "tagging", "acl", "lifecycle", "cors"):
            if sub in q:
                return await getattr(buckets, f"put_{sub}")(gw, req, p, ctx)
        if "ownershipControls" in q:
            return await buckets.put_ownership_controls(gw, req, p, ctx)
        return await buckets.create_bucket(gw, req, p, ctx)
    if m in ("GET", "HEAD") and m == "HEAD":
        return await buckets.head_bucket(gw, req, p)
    if m == "GET":
        for sub in _BUCKET_GET:
            if sub in q:
                return await buckets.get_sub(gw, req, p, sub)
        if "versions" in q:
            return await buckets.list_versions(gw, req, p)
        if "uploads" in q:
            return await multipart.list_uploads(gw, req, p)
        return await buckets.list_objects(gw, req, p, v2=q.get("list-type") == "2")
    if m == "DELETE":
        for sub in ("replication", "tagging", "notification", "lifecycle", "cors", *_BUCKET_DELETE_ABSENT):
            if sub in q:
                return await buckets.delete_sub(gw, req, p, sub)
        return await buckets.delete_bucket(gw, req, p)
    if m == "POST" and "delete" in q:
        return await objects.delete_objects(gw, req, p, ctx)
    raise S3Error("MethodNotAllowed")


async def _object(gw: Gateway, req: Request, p: Principal, ctx: Any, m: str, q: dict[str, str]) -> Response:
    if m == "PUT":
        if "tagging" in q:
            return await objects.put_tagging(gw, req, p, ctx)
        if "acl" in q:
            return await objects.put_acl(gw, req, p, ctx)
        if "uploadId" in q:
            if "x-amz-copy-source" in req.headers:
                return await multipart.upload_part_copy(gw, req, p, ctx)
            return await multipart.upload_part(gw, req, p, ctx)
        if "x-amz-copy-source" in req.headers:
            return await objects.copy_object(gw, req, p, ctx)
        return await objects.put_object(gw, req, p, ctx)
    if m in ("GET", "HEAD"):
        if "tagging" in q and m == "GET":
            return await objects.get_tagging(gw, req, p)
        if "acl" in q and m == "GET":
            return await objects.get_acl(gw, req, p)
        if "attributes" in q and m == "GET":
            return await attributes.get_object_attributes(gw, req, p)
        if "uploadId" in q and m == "GET":
            return await multipart.list_parts(gw, req, p)
        return await objects.get_object(gw, req, p, head=m == "HEAD")
    if m == "DELETE":
        if "tagging" in q:
            return await objects.delete_tagging(gw, req, p)
        if "uploadId" in q:
            return await multipart.abort_upload(gw, req, p)
        return await objects.delete_object(gw, req, p)
    if m == "POST":
        if "uploads" in q:
            return await multipart.create_upload(gw, req, p, ctx)
        if "uploadId" in q:
            return await multipart.complete_upload(gw, req, p, ctx)
    raise S3Error("MethodNotAllowed")
