"""Access control lists, as on an AWS bucket with Object Ownership `BucketOwnerEnforced`
(the default for new buckets since April 2023): ACLs are disabled, the bucket's owner owns
every object, and access follows ownership (crossbeat's users own the buckets they create).

So, as AWS does for such a bucket:
- a write may name only the ACLs that mean exactly that (`private`, `bucket-owner-full-control`,
  or a policy granting only the owner FULL_CONTROL); any other canned ACL, grant header or
  grant is AccessControlListNotSupported (InvalidBucketAclWithObjectOwnership on CreateBucket)
  and changes nothing: it is never silently dropped, which would leave an object private
  that its writer believes public;
- GetBucketOwnershipControls answers BucketOwnerEnforced, and only that setting can be put.
"""

from __future__ import annotations

from crossbeat.s3 import xmldoc
from crossbeat.s3.errors import S3Error

ENFORCED = "BucketOwnerEnforced"
_OWNER_ONLY_CANNED = frozenset({"private", "bucket-owner-full-control"})
GRANT_HEADERS = frozenset({
    "x-amz-grant-full-control",
    "x-amz-grant-read",
    "x-amz-grant-read-acp",
    "x-amz-grant-write",
    "x-amz-grant-write-acp",
})


def _not_supported(creating_bucket: bool) -> S3Error:
    if creating_bucket:
        return S3Error("InvalidBucketAclWithObjectOwnership")
    return S3Error("AccessControlListNotSupported")


def refuse_acl_headers(headers: dict[str, str], *, creating_bucket: bool = False) -> None:
    """Raise unless the request's ACL headers (x-amz-acl, x-amz-grant-*) grant nothing beyond
    the owner's full control."""
    canned = headers.get("x-amz-acl")
    if (canned is not None and canned.strip() not in _OWNER_ONLY_CANNED) or not GRANT_HEADERS.isdisjoint(
        headers
    ):
        raise _not_supported(creating_bucket)


def refuse_acl_document(body: bytes, owner_id: str) -> None:
    """Raise unless an AccessControlPolicy body (PutBucketAcl, PutObjectAcl) grants only
    FULL_CONTROL to `owner_id`; an empty body is no policy. MalformedXML if it is not one."""
    if not body.strip():
        return
    for grantee_id, permission in xmldoc.parse_acl_grants(body):
        if grantee_id != owner_id or permission != "FULL_CONTROL":
            raise _not_supported(False)


def check_ownership_controls(body: bytes) -> None:
    """PutBucketOwnershipControls: only BucketOwnerEnforced, the setting every bucket has."""
    if xmldoc.parse_ownership_controls(body) != ENFORCED:
        raise S3Error("NotImplemented", f"Only {ENFORCED} object ownership is supported: crossbeat "
                      "has no ACLs.")
