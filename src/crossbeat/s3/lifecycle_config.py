"""Bucket lifecycle configuration: parse and validate as AWS does, render it back, match
objects against its rules and count lifecycle days.

`parse_lifecycle(body)` returns a JSON-able dict (stored as `Bucket.lifecycle`)::

    {"rules": [{
        "id": "r1",                        # generated when the client sent none
        "status": "Enabled" | "Disabled",
        "prefix": "logs/",                 # legacy top-level <Prefix> (V1) or the filter's, or ""
        "filter": None                     # None: legacy rule with a top-level <Prefix>
                  | {"form": "" | "Prefix" | "Tag" | "And"
                             | "ObjectSizeGreaterThan" | "ObjectSizeLessThan",
                     "prefix": str | None, "tags": [[key, value], ...],
                     "gt": int | None, "lt": int | None},
        "expiration": None | {"days": n} | {"date": "2030-01-01T00:00:00.000Z"}
                           | {"eodm": true | false},        # ExpiredObjectDeleteMarker
        "noncurrent": None | {"days": n, "newer": n | None}, # NoncurrentVersionExpiration
        "abortDays": None | n}]}                             # AbortIncompleteMultipartUpload

Transition and NoncurrentVersionTransition are refused (NotImplemented): storage classes are
labels in crossbeat, so a rule moving data between them could never be applied, and a rule
accepted but not applied is worse than a refusal.

Days are counted as AWS counts them: from the object's creation (or the moment a version
became noncurrent), plus n days, rounded up to the next midnight UTC. `day_seconds` stands
for the length of a day (86400; smaller in tests, as Ceph RGW's rgw_lc_debug_interval), and
"midnight" is then every multiple of `day_seconds` since the epoch.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree as ET

from crossbeat.s3.errors import S3Error
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.xmldoc import XmlWriter, child_text, parse_xml

MAX_RULES = 1000
MAX_RULE_ID = 255
MAX_NEWER_NONCURRENT = 100
_STATUS = ("Enabled", "Disabled")
_RULE_CHILDREN = {
    "ID",
    "Prefix",
    "Filter",
    "Status",
    "Expiration",
    "NoncurrentVersionExpiration",
    "AbortIncompleteMultipartUpload",
    "Transition",
    "NoncurrentVersionTransition",
}
_FILTER_FORMS = ("Prefix", "Tag", "And", "ObjectSizeGreaterThan", "ObjectSizeLessThan")

Config = dict[str, Any]
Rule = dict[str, Any]


def _malformed(message: str) -> S3Error:
    return S3Error("MalformedXML", message)


def _invalid_argument(message: str) -> S3Error:
    return S3Error("InvalidArgument", message)


def _invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", message)


TRANSITION_SIZE_HEADER = "x-amz-transition-default-minimum-object-size"
TRANSITION_SIZE_DEFAULTS = ("all_storage_classes_128K", "varies_by_storage_class")


def transition_size_default(headers: dict[str, str]) -> str:
    """The request's x-amz-transition-default-minimum-object-size, AWS's default when it
    has none; another value is InvalidArgument. Kept with the configuration and answered
    back as AWS does, though crossbeat makes no transitions."""
    value = headers.get(TRANSITION_SIZE_HEADER, TRANSITION_SIZE_DEFAULTS[0])
    if value not in TRANSITION_SIZE_DEFAULTS:
        raise S3Error("InvalidArgument", f"Invalid {TRANSITION_SIZE_HEADER}: {value!r} (one of "
                      f"{', '.join(TRANSITION_SIZE_DEFAULTS)})",
                      extra={"ArgumentName": TRANSITION_SIZE_HEADER, "ArgumentValue": value})
    return value


# --------------------------------------------------------------------------------------------
# parsing


# S3's Integer (Days, NoncurrentDays, DaysAfterInitiation...) and Long (object sizes): a
# larger value was stored and then failed every request of an object it applied to (a date
# past year 9999) or the configuration's own storing (past 64 bits)
_INTEGER_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def _positive_int(text: str | None, message: str, *, limit: int = _INTEGER_MAX) -> int:
    number = ascii_int((text or "").strip(), signed=True)
    if number is None:
        raise _malformed(message)
    if number <= 0 or number > limit:
        raise _invalid_argument(message)
    return number


def _size(text: str | None, name: str) -> int:
    number = ascii_int((text or "").strip(), signed=True)
    if number is None:
        raise _malformed(f"{name} must be an integer.")
    if number < 0 or number > _LONG_MAX:
        raise _invalid_argument(f"{name} must be a non-negative integer.")
    return number


# The last moment an HTTP date can name (9999-12-31T23:59:59Z): a rule's date beyond it
# (a Days in the millions) goes unsaid in the headers; nothing expires before it anyway.
_LAST_HTTP_DATE = 253402300799.0


def _tag(element: ET.Element) -> list[str]:
    key = child_text(element, "Key")
    value = child_text(element, "Value")
    if key is None or value is None or len(element) != 2:
        raise _malformed("A filter Tag holds a Key and a Value.")
    if not key or len(key) > 128 or len(value) > 256:
        raise S3Error("InvalidTag", "The tag provided was not a valid tag.")
    return [key, value]


def _parse_filter(element: ET.Element) -> dict[str, Any]:
    result: dict[str, Any] = {"form": "", "prefix": None, "tags": [], "gt": None, "lt": None}
    forms = list(element)
    if any(child.tag not in _FILTER_FORMS for child in forms):
        raise _malformed("A Filter holds Prefix, Tag, And, ObjectSizeGreaterThan or ObjectSizeLessThan.")
    if len(forms) > 1:
        raise _malformed("A Filter holds only one of Prefix, Tag, And, ObjectSizeGreaterThan or ObjectSizeLessThan.")
    if not forms:
        return result
    form = forms[0]
    result["form"] = form.tag
    if form.tag == "Prefix":
        result["prefix"] = form.text or ""
    elif form.tag == "Tag":
        result["tags"] = [_tag(form)]
    elif form.tag == "ObjectSizeGreaterThan":
        result["gt"] = _size(form.text, form.tag)
    elif form.tag == "ObjectSizeLessThan":
        result["lt"] = _size(form.text, form.tag)
    else:
        allowed = ("Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan")
        if any(child.tag not in allowed for child in form):
            raise _malformed("An And filter holds Prefix, Tags, ObjectSizeGreaterThan and ObjectSizeLessThan.")
        for single in ("Prefix", "ObjectSizeGreaterThan", "ObjectSizeLessThan"):
            if len(form.findall(single)) > 1:
                raise _malformed(f"An And filter holds at most one {single}.")
        if not len(form):
            raise _malformed("An And filter needs at least one predicate.")
        prefix = form.find("Prefix")
        result["prefix"] = None if prefix is None else prefix.text or ""
        result["tags"] = [_tag(tag) for tag in form.findall("Tag")]
        keys = [key for key, _ in result["tags"]]
        if len(set(keys)) != len(keys):
            raise _invalid_request("Duplicate Tag Keys are not allowed.")
        gt, lt = form.find("ObjectSizeGreaterThan"), form.find("ObjectSizeLessThan")
        result["gt"] = None if gt is None else _size(gt.text, gt.tag)
        result["lt"] = None if lt is None else _size(lt.text, lt.tag)
        if result["gt"] is not None and result["lt"] is not None and result["gt"] >= result["lt"]:
            raise _invalid_request("ObjectSizeGreaterThan must be less than ObjectSizeLessThan.")
    return result


def _parse_date(text: str) -> str:
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _invalid_argument("'Date' must be in ISO 8601 format.") from None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if (moment.hour, moment.minute, moment.second, moment.microsecond) != (0, 0, 0, 0):
        raise _invalid_argument("'Date' must be at midnight GMT")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _parse_expiration(element: ET.Element) -> dict[str, Any]:
    if any(child.tag not in ("Days", "Date", "ExpiredObjectDeleteMarker") for child in element):
        raise _malformed("An Expiration holds Days, Date or ExpiredObjectDeleteMarker.")
    present = [child.tag for child in element]
    if len(present) != 1:
        if "ExpiredObjectDeleteMarker" in present:
            raise _malformed(
                "ExpiredObjectDeleteMarker cannot be specified with Days or Date in a Lifecycle"
                " Expiration Policy."
            )
        raise _malformed("An Expiration holds exactly one of Days, Date or ExpiredObjectDeleteMarker.")
    text = element[0].text or ""
    if present[0] == "Days":
        return {"days": _positive_int(text, "'Days' for Expiration action must be a positive integer")}
    if present[0] == "Date":
        return {"date": _parse_date(text)}
    flag = text.strip().lower()
    if flag not in ("true", "false"):
        raise _malformed("ExpiredObjectDeleteMarker must be true or false.")
    return {"eodm": flag == "true"}


def _parse_noncurrent(element: ET.Element) -> dict[str, Any]:
    if any(child.tag not in ("NoncurrentDays", "NewerNoncurrentVersions") for child in element):
        raise _malformed("A NoncurrentVersionExpiration holds NoncurrentDays and NewerNoncurrentVersions.")
    days = child_text(element, "NoncurrentDays")
    if days is None:
        raise _malformed("A NoncurrentVersionExpiration needs NoncurrentDays.")
    newer = child_text(element, "NewerNoncurrentVersions")
    return {
        "days": _positive_int(
            days, "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer"
        ),
        "newer": None if newer is None else _positive_int(
            newer,
            "'NewerNoncurrentVersions' for NoncurrentVersionExpiration action must be a positive"
            f" integer up to {MAX_NEWER_NONCURRENT}",
            limit=MAX_NEWER_NONCURRENT,
        ),
    }


def _parse_rule(element: ET.Element) -> Rule:
    for child in element:
        if child.tag not in _RULE_CHILDREN:
            raise _malformed(f"Unexpected element {child.tag} in a lifecycle Rule.")
        if child.tag not in ("Transition", "NoncurrentVersionTransition") and len(
            element.findall(child.tag)
        ) > 1:
            raise _malformed(f"A lifecycle Rule holds at most one {child.tag}.")
    for unsupported in ("Transition", "NoncurrentVersionTransition"):
        if element.find(unsupported) is not None:
            raise S3Error(
                "NotImplemented",
                f"{unsupported} is not implemented by crossbeat: storage classes are labels here,"
                " so no rule can move data between them. The lifecycle configuration was not changed.",
            )
    rule_id = child_text(element, "ID")
    if rule_id is not None and len(rule_id) > MAX_RULE_ID:
        raise _invalid_argument("ID length should not exceed allowed limit of 255")
    status = (child_text(element, "Status") or "").strip()
    if status not in _STATUS:
        raise _malformed("A lifecycle Rule's Status must be Enabled or Disabled.")
    prefix_element = element.find("Prefix")
    filter_element = element.find("Filter")
    if prefix_element is not None and filter_element is not None:
        raise _malformed("A lifecycle Rule has either a Prefix or a Filter, not both.")
    if prefix_element is None and filter_element is None:
        raise _malformed("A lifecycle Rule needs a Filter (or a Prefix).")
    flt = None if filter_element is None else _parse_filter(filter_element)
    prefix = (prefix_element.text or "") if prefix_element is not None else (flt or {}).get("prefix") or ""
    expiration_element = element.find("Expiration")
    noncurrent_element = element.find("NoncurrentVersionExpiration")
    abort_element = element.find("AbortIncompleteMultipartUpload")
    rule: Rule = {
        "id": rule_id.strip() if rule_id and rule_id.strip() else None,
        "status": status,
        "prefix": prefix,
        "filter": flt,
        "expiration": None if expiration_element is None else _parse_expiration(expiration_element),
        "noncurrent": None if noncurrent_element is None else _parse_noncurrent(noncurrent_element),
        "abortDays": None,
    }
    if abort_element is not None:
        if any(child.tag != "DaysAfterInitiation" for child in abort_element):
            raise _malformed("An AbortIncompleteMultipartUpload holds DaysAfterInitiation.")
        rule["abortDays"] = _positive_int(
            child_text(abort_element, "DaysAfterInitiation"),
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
        )
    if rule["expiration"] is None and rule["noncurrent"] is None and rule["abortDays"] is None:
        raise _invalid_request("At least one action needs to be specified in a rule")
    tags = (flt or {}).get("tags")
    if tags and rule["abortDays"] is not None:
        raise _invalid_request("AbortIncompleteMultipartUpload cannot be specified with Tags.")
    if tags and (rule["expiration"] or {}).get("eodm") is not None:
        raise _invalid_request("ExpiredObjectDeleteMarker cannot be specified with Tags.")
    sized = flt is not None and (flt["gt"] is not None or flt["lt"] is not None)
    if sized and rule["abortDays"] is not None:
        # an upload has no size yet: such a rule could never select one
        raise _invalid_request("AbortIncompleteMultipartUpload cannot be specified with an object size filter.")
    return rule


def parse_lifecycle(body: bytes | str) -> Config:
    """Validate a PutBucketLifecycleConfiguration (or legacy PutBucketLifecycle) body and
    return the configuration dict (see the module docstring).

    Errors (as AWS): ill-formed, unknown or repeated elements, a rule without Status or
    without Filter/Prefix, both Filter and Prefix, a Filter with more than one predicate, an
    Expiration with more than one of Days/Date/ExpiredObjectDeleteMarker → MalformedXML;
    ID over 255 characters, duplicate IDs, Days/NoncurrentDays/DaysAfterInitiation not a
    positive integer, NewerNoncurrentVersions outside 1..100, a Date not at midnight UTC →
    InvalidArgument; a rule with no action, Tags with AbortIncompleteMultipartUpload or
    ExpiredObjectDeleteMarker, ObjectSizeGreaterThan >= ObjectSizeLessThan, duplicate tag
    keys, more than 1000 rules → InvalidRequest; Transition, NoncurrentVersionTransition →
    NotImplemented."""
    root = parse_xml(body)
    if root.tag != "LifecycleConfiguration":
        raise _malformed("Expected a LifecycleConfiguration document.")
    if any(child.tag != "Rule" for child in root):
        raise _malformed("A LifecycleConfiguration holds Rules only.")
    elements = root.findall("Rule")
    if not elements:
        raise _malformed("A LifecycleConfiguration needs at least one Rule.")
    if len(elements) > MAX_RULES:
        raise _invalid_request(f"A lifecycle configuration may hold at most {MAX_RULES} rules.")
    rules = [_parse_rule(element) for element in elements]
    ids = [rule["id"] for rule in rules if rule["id"] is not None]
    if len(set(ids)) != len(ids):
        raise _invalid_argument("Rule ID must be unique. Found same ID for more than one rule")
    taken = set(ids)
    for rule in rules:
        while rule["id"] is None:
            candidate = uuid.uuid4().hex
            if candidate not in taken:
                rule["id"] = candidate
                taken.add(candidate)
    return {"rules": rules}


# --------------------------------------------------------------------------------------------
# rendering


def _write_filter(w: XmlWriter, flt: dict[str, Any]) -> None:
    w.open("Filter")
    form = flt["form"]
    if form == "Prefix":
        w.leaf("Prefix", flt["prefix"] or "")
    elif form == "Tag":
        key, value = flt["tags"][0]
        w.open("Tag").leaf("Key", key).leaf("Value", value).close()
    elif form == "ObjectSizeGreaterThan":
        w.leaf("ObjectSizeGreaterThan", flt["gt"])
    elif form == "ObjectSizeLessThan":
        w.leaf("ObjectSizeLessThan", flt["lt"])
    elif form == "And":
        w.open("And").leaf("Prefix", flt["prefix"])
        for key, value in flt["tags"]:
            w.open("Tag").leaf("Key", key).leaf("Value", value).close()
        w.leaf("ObjectSizeGreaterThan", flt["gt"]).leaf("ObjectSizeLessThan", flt["lt"])
        w.close()
    w.close()


def lifecycle_xml(config: Config) -> bytes:
    """GetBucketLifecycleConfiguration body for a configuration from `parse_lifecycle`."""
    w = XmlWriter("LifecycleConfiguration")
    for rule in config["rules"]:
        w.open("Rule").leaf("ID", rule["id"])
        if rule["filter"] is None:
            w.leaf("Prefix", rule["prefix"])
        else:
            _write_filter(w, rule["filter"])
        w.leaf("Status", rule["status"])
        expiration = rule.get("expiration")
        if expiration is not None:
            w.open("Expiration")
            w.leaf("Days", expiration.get("days")).leaf("Date", expiration.get("date"))
            if "eodm" in expiration:
                w.leaf("ExpiredObjectDeleteMarker", "true" if expiration["eodm"] else "false")
            w.close()
        noncurrent = rule.get("noncurrent")
        if noncurrent is not None:
            w.open("NoncurrentVersionExpiration").leaf("NoncurrentDays", noncurrent["days"])
            w.leaf("NewerNoncurrentVersions", noncurrent.get("newer")).close()
        if rule.get("abortDays") is not None:
            w.open("AbortIncompleteMultipartUpload").leaf("DaysAfterInitiation", rule["abortDays"])
            w.close()
        w.close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# matching and days


def has_enabled_rule(config: Config | None) -> bool:
    return bool(config) and any(rule.get("status") == "Enabled" for rule in config["rules"])  # type: ignore[index]


def rule_matches(rule: Rule, key: str, tags: dict[str, str] | None, size: int | None) -> bool:
    """Whether an enabled `rule`'s filter selects an object with `key`, `tags` and `size`
    (size None: an upload, which no size filter selects; parse_lifecycle refuses such rules
    with AbortIncompleteMultipartUpload). Sizes compare strictly, as AWS's do."""
    if rule.get("status") != "Enabled" or not key.startswith(rule.get("prefix") or ""):
        return False
    flt = rule.get("filter") or {}
    object_tags = tags or {}
    if not all(object_tags.get(k) == v for k, v in flt.get("tags") or []):
        return False
    gt, lt = flt.get("gt"), flt.get("lt")
    if gt is not None and (size is None or size <= gt):
        return False
    return lt is None or (size is not None and size < lt)


def days_after(start: float, days: int, day_seconds: float) -> float:
    """When `days` lifecycle days after `start` (epoch seconds) are over: start + days,
    rounded up to the next "midnight" (a multiple of `day_seconds` since the epoch; midnight
    UTC for 86400), as AWS counts."""
    return math.ceil((start + days * day_seconds) / day_seconds) * day_seconds


def epoch(iso: str) -> float:
    """An ISO 8601 UTC timestamp (`…Z`, as lastModified/initiated/Date) as epoch seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def current_expiry(
    config: Config | None, key: str, tags: dict[str, str] | None, size: int, created: str, day_seconds: float
) -> tuple[float, str] | None:
    """(when, rule id) at which the current version of `key` expires under the earliest of
    the matching rules' Expiration Days/Date, or None if no rule expires it."""
    best: tuple[float, str] | None = None
    for rule in (config or {}).get("rules", []):
        expiration = rule.get("expiration") or {}
        if not ("days" in expiration or "date" in expiration):
            continue
        if not rule_matches(rule, key, tags, size):
            continue
        if "days" in expiration:
            when = days_after(epoch(created), expiration["days"], day_seconds)
        else:
            when = epoch(expiration["date"])
        if best is None or when < best[0]:
            best = (when, rule["id"])
    return best


def expiration_header(config: Config | None, meta: dict[str, Any], day_seconds: float) -> str | None:
    """The x-amz-expiration value for object version `meta` (GET, HEAD, PUT answers):
    `expiry-date="<HTTP date>", rule-id="<URL-encoded rule id>"` of the earliest Expiration
    that applies to it, as AWS sends; None when none does, when `meta` is not the current
    version (Expiration acts on current versions) or is a delete marker."""
    if not config or meta.get("isDeleteMarker") or meta.get("isLatest") is False:
        return None
    found = current_expiry(
        config, meta["key"], meta.get("tags"), int(meta.get("size") or 0), meta["lastModified"], day_seconds
    )
    if found is None:
        return None
    when, rule_id = found
    if when > _LAST_HTTP_DATE:
        return None
    return f'expiry-date="{formatdate(when, usegmt=True)}", rule-id="{quote(rule_id, safe="")}"'


def abort_headers(config: Config | None, key: str, initiated: str, day_seconds: float) -> dict[str, str]:
    """x-amz-abort-date and x-amz-abort-rule-id for a multipart upload of `key` initiated at
    `initiated` (CreateMultipartUpload and ListParts answers, as S3 sends them): the moment
    the earliest matching enabled AbortIncompleteMultipartUpload rule makes the upload
    eligible for abort (what the lifecycle pass acts on) and that rule's id; {} when no rule
    selects the upload."""
    best: tuple[float, str] | None = None
    for rule in (config or {}).get("rules", []):
        if rule.get("abortDays") is None or not rule_matches(rule, key, None, None):
            continue
        when = days_after(epoch(initiated), rule["abortDays"], day_seconds)
        if best is None or when < best[0]:
            best = (when, rule["id"])
    if best is None or best[0] > _LAST_HTTP_DATE:
        return {}
    when, rule_id = best
    # a rule id may hold any character; a header value only printable ASCII
    printable = rule_id.isascii() and rule_id.isprintable()
    return {
        "x-amz-abort-date": formatdate(when, usegmt=True),
        "x-amz-abort-rule-id": rule_id if printable else quote(rule_id, safe=""),
    }
