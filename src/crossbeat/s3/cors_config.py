"""Bucket CORS configuration: parse and validate as AWS does, render it back, and find the
rule a cross-origin request matches and the Access-Control-* headers S3 answers with.

`parse_cors(body)` returns a JSON-able dict (stored as `Bucket.cors`)::

    {"rules": [{"id": "r1" | None,
                "allowedMethods": ["GET", ...],        # GET PUT POST DELETE HEAD
                "allowedOrigins": ["https://*.example.com", ...],
                "allowedHeaders": ["x-amz-*", ...],   # as sent: GetBucketCors gives cases back
                "exposeHeaders": ["ETag", ...],
                "maxAgeSeconds": 3000 | None}]}

Matching (S3's evaluation, as recorded against AWS; see `find_rule`): the first rule whose
AllowedOrigin, AllowedMethod and AllowedHeaders all accept the request wins. A pattern holds
at most one `*`, which stands for any run of characters, the empty one included; patterns
are anchored at both ends. Origins compare case-sensitively (browsers send them lower-case),
header names case-insensitively.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

from crossbeat.s3.errors import S3Error
from crossbeat.s3.numerals import ascii_int
from crossbeat.s3.objectmeta import is_header_name
from crossbeat.s3.xmldoc import XmlWriter, parse_xml

MAX_RULES = 100
MAX_RULE_ID = 255
MAX_DOCUMENT_BYTES = 64 * 1024  # "The document is limited to 64 KB in size."
METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")
# what S3 answers in Vary on every response a rule matched
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
# the lists of a rule: XML element -> stored key
_LISTS = {
    "AllowedHeader": "allowedHeaders",
    "AllowedMethod": "allowedMethods",
    "AllowedOrigin": "allowedOrigins",
    "ExposeHeader": "exposeHeaders",
}
_SINGLES = ("ID", "MaxAgeSeconds")
_INT32_MAX = 2**31 - 1

Config = dict[str, Any]
Rule = dict[str, Any]


def _malformed(message: str | None = None) -> S3Error:
    return S3Error("MalformedXML", message)


def _invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", message)


# --------------------------------------------------------------------------------------------
# parsing


def _parse_rule(element: ET.Element) -> Rule:
    rule: Rule = {key: [] for key in _LISTS.values()}
    rule["id"] = None
    rule["maxAgeSeconds"] = None
    for child in element:
        if len(child):
            raise _malformed(f"{child.tag} holds text only.")
        text = child.text or ""
        if child.tag in _LISTS:
            rule[_LISTS[child.tag]].append(text)
        elif child.tag in _SINGLES:
            if len(element.findall(child.tag)) > 1:
                raise _malformed(f"A CORSRule holds at most one {child.tag}.")
        else:
            raise _malformed(f"Unexpected element {child.tag} in a CORSRule.")
    if not rule["allowedOrigins"] or not rule["allowedMethods"]:
        raise _malformed("Each CORSRule must identify at least one origin and one method.")
    rule_id = element.findtext("ID")
    if rule_id is not None:
        if len(rule_id) > MAX_RULE_ID:
            raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of 255")
        rule["id"] = rule_id
    max_age = element.findtext("MaxAgeSeconds")
    if max_age is not None:
        seconds = ascii_int(max_age.strip(), signed=True)
        if seconds is None or seconds > _INT32_MAX:  # an Integer in AWS's schema
            raise _malformed("MaxAgeSeconds must be an integer.")
        if seconds < 0:
            raise _invalid_request("MaxAgeSeconds must be a non-negative integer.")
        rule["maxAgeSeconds"] = seconds
    for method in rule["allowedMethods"]:
        if method not in METHODS:
            raise _invalid_request(f"Found unsupported HTTP method in CORS config. Unsupported method is {method}")
    for origin in rule["allowedOrigins"]:
        if origin.count("*") > 1:
            raise _invalid_request(f'AllowedOrigin "{origin}" can not have more than one wildcard.')
    for header in rule["allowedHeaders"]:
        if header.count("*") > 1:
            raise _invalid_request(f'AllowedHeader "{header}" can not have more than one wildcard.')
    for header in rule["exposeHeaders"]:
        if "*" in header:
            raise _invalid_request(
                f'ExposeHeader "{header}" contains wildcard. We currently do not support wildcard for ExposeHeader.'
            )
        # echoed in Access-Control-Expose-Headers of every matching answer: a CR/LF there
        # made each of them a 500
        if not is_header_name(header):
            raise _invalid_request(f"ExposeHeader {header!r} is not a header name.")
    return rule


def parse_cors(body: bytes | str) -> Config:
    """Validate a PutBucketCors body and return the configuration dict (see the module
    docstring). Values are kept as sent (GetBucketCors gives them back unchanged).

    Errors (as AWS, where recorded): ill-formed, unknown or nested elements, no CORSRule, more
    than 100 rules, a rule without AllowedOrigin or AllowedMethod, a second ID or
    MaxAgeSeconds, a MaxAgeSeconds that is not an integer → MalformedXML; an AllowedMethod
    other than GET/PUT/POST/DELETE/HEAD ("Found unsupported HTTP method in CORS config.
    Unsupported method is …"), an AllowedOrigin or AllowedHeader with more than one `*`, an
    ExposeHeader with any `*`, a negative MaxAgeSeconds → InvalidRequest; an ID over 255
    characters → InvalidArgument."""
    root = parse_xml(body)
    if root.tag != "CORSConfiguration":
        raise _malformed("Expected a CORSConfiguration document.")
    if any(child.tag != "CORSRule" for child in root):
        raise _malformed("A CORSConfiguration holds CORSRules only.")
    elements = root.findall("CORSRule")
    if not elements:
        raise _malformed()
    if len(elements) > MAX_RULES:
        # the published schema's bound: "You can add up to 100 rules to the configuration."
        raise _malformed(f"A CORS configuration holds at most {MAX_RULES} rules.")
    return {"rules": [_parse_rule(element) for element in elements]}


def cors_xml(config: Config) -> bytes:
    """GetBucketCors body for a configuration from `parse_cors` (elements in the order of
    AWS's CORSRule syntax; only those the rule has)."""
    w = XmlWriter("CORSConfiguration")
    for rule in config["rules"]:
        w.open("CORSRule")
        for element, key in _LISTS.items():
            for value in rule.get(key) or []:
                w.leaf(element, value)
        w.leaf("ID", rule.get("id")).leaf("MaxAgeSeconds", rule.get("maxAgeSeconds"))
        w.close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# matching


def wildcard_match(pattern: str, value: str) -> bool:
    """Whether `value` matches `pattern`, whose one `*` (if any) stands for any run of
    characters, the empty one included; anchored at both ends, case-sensitive."""
    star = pattern.find("*")
    if star < 0:
        return pattern == value
    prefix, suffix = pattern[:star], pattern[star + 1 :]
    return len(value) >= len(prefix) + len(suffix) and value.startswith(prefix) and value.endswith(suffix)


def requested_headers(value: str | None) -> list[str]:
    """The names of an Access-Control-Request-Headers value, lower-cased, in the order sent
    (a comma-separated list; blanks around and empty elements are dropped)."""
    if not value:
        return []
    names = (name.strip().lower() for name in value.split(","))
    return [name for name in names if name]


def find_rule(config: Config | None, origin: str, method: str, headers: list[str]) -> Rule | None:
    """The first rule of `config` that allows `origin` to use `method` with every one of the
    (lower-cased) request `headers`; None if no rule does. A rule without AllowedHeader
    allows no requested header. For a preflight, `method` and `headers` are what
    Access-Control-Request-Method/-Headers ask for; for an actual request S3 takes
    Access-Control-Request-Method when present, else the request's method."""
    for rule in (config or {}).get("rules", []):
        if method not in rule["allowedMethods"]:
            continue
        if not any(wildcard_match(allowed, origin) for allowed in rule["allowedOrigins"]):
            continue
        if headers:
            allowed_headers = [h.lower() for h in rule["allowedHeaders"]]
            if not all(any(wildcard_match(a, h) for a in allowed_headers) for h in headers):
                continue
        return rule
    return None


def response_headers(rule: Rule, origin: str, headers: list[str]) -> dict[str, str]:
    """The Access-Control-* headers (and Vary) S3 answers when `rule` matched a request from
    `origin` asking for `headers`: Allow-Origin is `*` when the rule allows any origin (and
    then no Allow-Credentials), else the origin itself with `Allow-Credentials: true`;
    Allow-Methods lists the rule's methods; Allow-Headers the requested names (lower-case);
    Expose-Headers and Max-Age when the rule has them."""
    out: dict[str, str] = {}
    if "*" in rule["allowedOrigins"]:
        out["access-control-allow-origin"] = "*"
    else:
        out["access-control-allow-origin"] = origin
        out["access-control-allow-credentials"] = "true"
    out["access-control-allow-methods"] = ", ".join(rule["allowedMethods"])
    if headers:
        out["access-control-allow-headers"] = ", ".join(headers)
    if rule["exposeHeaders"]:
        out["access-control-expose-headers"] = ", ".join(rule["exposeHeaders"])
    if rule["maxAgeSeconds"] is not None:
        out["access-control-max-age"] = str(rule["maxAgeSeconds"])
    out["vary"] = VARY
    return out
