"""S3 errors: one exception type carrying the AWS code, HTTP status and message.

Handlers raise `S3Error`; the gateway turns it into the S3 XML error body in exactly one
place (`crossbeat.s3.app`). Use the constructors below so codes and statuses stay right.
"""

from __future__ import annotations

import errno

from crossbeat.errors import CrossbeatError

# AWS code -> (HTTP status, default message)
CODES: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Query-string authentication parameters are invalid."),
    "BadDigest": (400, "The Content-MD5 or checksum you specified did not match what we received."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available."),
    "BucketAlreadyOwnedByYou": (409, "Your previous request to create the named bucket succeeded and you already own it."),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty."),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),
    "IllegalVersioningConfigurationException": (400, "The versioning configuration specified in the request is invalid."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS access key Id you provided does not exist in our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidDigest": (400, "The Content-MD5 or checksum you specified is not valid."),
    "InvalidLocationConstraint": (400, "The specified location-constraint is not valid."),
    "InvalidPolicyDocument": (400, "The content of the form does not meet the conditions specified in the policy document."),
    "MalformedPOSTRequest": (400, "The body of your POST request is not well-formed multipart/form-data."),
    "MaxPostPreDataLengthExceeded": (400, "Your POST request fields preceeding the upload file was too large."),
    "InvalidPart": (400, "One or more of the specified parts could not be found."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order."),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "InvalidToken": (400, "The provided token is malformed or otherwise invalid."),
    "InvalidRequest": (400, "Invalid Request"),
    "AccessControlListNotSupported": (400, "The bucket does not allow ACLs"),
    "BadRequest": (400, "Bad Request"),
    "InvalidBucketAclWithObjectOwnership": (400, "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"),
    "InvalidStorageClass": (400, "The storage class you specified is not valid"),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "KeyTooLongError": (400, "Your key is too long."),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "NoSuchBucket": (404, "The specified bucket does not exist."),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchTagSet": (404, "The TagSet does not exist."),
    "NoSuchUpload": (404, "The specified multipart upload does not exist."),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NotImplemented": (501, "A header you provided implies functionality that is not implemented."),
    "PreconditionFailed": (412, "At least one of the pre-conditions you specified did not hold."),
    "NotModified": (304, "Not Modified"),
    "ReplicationConfigurationNotFoundError": (404, "The replication configuration was not found."),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the current time is too large."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the signature you provided. Check your key and signing method."),
    "SlowDown": (503, "Please reduce your request rate."),
    "ServiceUnavailable": (503, "Service is unable to handle request."),
    # not an AWS code (S3 never fills up): Ceph RGW's answer to a full store, which clients
    # do not retry as they would a 5xx of 500-504
    "InsufficientCapacity": (507, "Insufficient capacity."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
    "InvalidObjectState": (403, "The operation is not valid for the object's storage class."),
    "OperationAborted": (409, "A conflicting conditional operation is currently in progress against this resource."),
    "ConditionalRequestConflict": (409, "A conflicting operation occurred."),
    "RevisionMismatch": (409, "The metadata revision you expected is not the current one."),
    "TruncatedJournal": (410, "The journal range you asked for has been truncated."),
}


class S3Error(CrossbeatError):
    """An S3 error response: `code` (AWS code), `status`, `message`, `resource`.

    `headers` are extra response headers (for example `x-amz-delete-marker`, `Allow`).
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        status: int | None = None,
        resource: str = "",
        headers: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        default_status, default_message = CODES.get(code, (400, code))
        self.code = code
        self.status = status if status is not None else default_status
        self.message = message or default_message
        self.resource = resource
        self.headers = dict(headers or {})
        # extra elements rendered inside <Error> (e.g. BucketName, Key, ArgumentName)
        self.extra = dict(extra or {})
        super().__init__(f"{code}: {self.message}")


_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # "database or disk is full"


def resource_error(exc: BaseException) -> S3Error | None:
    """The S3 error for a request that failed for want of a resource rather than for its
    data or a bug, if `exc` or an exception it was raised from is one:

    - out of file descriptors (EMFILE, ENFILE): 503 SlowDown, which clients retry; they
      free themselves as requests end;
    - out of space (ENOSPC, EDQUOT, SQLite's SQLITE_FULL): 507 InsufficientCapacity, as
      Ceph RGW answers; retrying does not help until someone frees space.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # along the causes; a bound, in case of a cycle
        if seen is None:
            return None
        code = seen.errno if isinstance(seen, OSError) else None
        if code in _NO_DESCRIPTORS:
            return S3Error("SlowDown", "Please reduce your request rate: the server is out of file descriptors.")
        if code in _NO_SPACE or getattr(seen, "sqlite_errorcode", None) == _SQLITE_FULL:
            return S3Error("InsufficientCapacity", "Insufficient capacity: the storage this request writes to is full.")
        seen = seen.__cause__ or seen.__context__
    return None
