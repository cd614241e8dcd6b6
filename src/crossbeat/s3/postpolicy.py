"""POST Object's credentials and policy: who signed a form, and whether the form keeps to
the policy it carries (see postobject.py for the request as a whole).

- SigV4 (`x-amz-algorithm`, `x-amz-credential`, `x-amz-date`, `x-amz-signature` = hex
  HMAC-SHA256 of the base64 `policy` under the credential's signing key) or SigV2
  (`AWSAccessKeyId`, `signature` = base64 HMAC-SHA1 of the policy), checked over the policy
  text as sent, before it is decoded; a form with neither is anonymous (AccessDenied).
- The policy (base64 JSON `{"expiration", "conditions"}`) must not have expired and every
  condition must hold (AccessDenied "Invalid according to Policy: ..."); a malformed one is
  InvalidPolicyDocument. Every field but `file`, `policy`, the signature fields and
  `x-ignore-*` must be named by a condition ("Extra input fields").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from crossbeat.s3.auth import ALGORITHM_V4, Principal, hmac_sha256, parse_credential, signing_key
from crossbeat.s3.errors import S3Error

if TYPE_CHECKING:
    from crossbeat.s3.gateway import Gateway

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
_EXPIRATION = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\Z")


def missing_field(name: str) -> S3Error:
    return S3Error(
        "InvalidArgument",
        f"Bucket POST must contain a field named '{name}'.  If it is specified, please check the order of the fields.",
        extra={"ArgumentName": name, "ArgumentValue": ""},
    )


def field_value(fields: dict[str, tuple[str, str]], name: str) -> str | None:
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
            raise missing_field(spelled)
    policy = field_value(fields, "policy")
    if policy is None:
        raise missing_field("Policy")
    if v4:
        algorithm = field_value(fields, "x-amz-algorithm")
        if algorithm != ALGORITHM_V4:
            raise S3Error("InvalidArgument", f'X-Amz-Algorithm only supports "{ALGORITHM_V4}"',
                          extra={"ArgumentName": "X-Amz-Algorithm", "ArgumentValue": algorithm or ""})
        credential = field_value(fields, "x-amz-credential") or ""
        access_key, date, region = parse_credential(credential, "InvalidArgument")
        amz_date = field_value(fields, "x-amz-date") or ""
        if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date):
            raise S3Error("InvalidArgument", "X-Amz-Date must be formated via ISO8601 Long format",
                          extra={"ArgumentName": "X-Amz-Date", "ArgumentValue": amz_date})
        if amz_date[:8] != date:  # AWS: the date the signing key was made with
            raise S3Error("InvalidArgument", f"Invalid credential date {date!r}. Date is not the same as "
                          f"X-Amz-Date: {amz_date[:8]!r}.",
                          extra={"ArgumentName": "X-Amz-Date", "ArgumentValue": amz_date})
        principal = _principal(gw, access_key)
        given = (field_value(fields, "x-amz-signature") or "").strip().lower()
        expected = hmac_sha256(signing_key(principal.secret_key, date, region), policy.encode("utf-8")).hex()
    else:
        access_key = field_value(fields, "awsaccesskeyid") or ""
        principal = _principal(gw, access_key)
        given = (field_value(fields, "signature") or "").strip()
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
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: JSON nested too deep
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
        return field_value(fields, name)

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
