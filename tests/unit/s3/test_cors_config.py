"""CORS configuration: AWS validation rules, faithful round trips, rule matching and the
Access-Control-* headers a matched rule answers with."""

from __future__ import annotations

import pytest

from crossbeat.s3.cors_config import (
    VARY,
    cors_xml,
    find_rule,
    parse_cors,
    requested_headers,
    response_headers,
    wildcard_match,
)
from crossbeat.s3.errors import S3Error


def doc(*rules: str) -> str:
    return '<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' + "".join(rules) + "</CORSConfiguration>"


def rule(origins: tuple[str, ...] = ("*",), methods: tuple[str, ...] = ("GET",), extra: str = "") -> str:
    return ("<CORSRule>" + "".join(f"<AllowedOrigin>{o}</AllowedOrigin>" for o in origins)
            + "".join(f"<AllowedMethod>{m}</AllowedMethod>" for m in methods) + extra + "</CORSRule>")


def error_of(body: str) -> tuple[str, str]:
    with pytest.raises(S3Error) as exc:
        parse_cors(body)
    return exc.value.code, exc.value.message


def test_a_full_rule_is_parsed_as_sent() -> None:
    config = parse_cors(doc(rule(
        ("https://app.example.com", "http://*.example.com"), ("GET", "PUT"),
        "<AllowedHeader>X-Amz-*</AllowedHeader><AllowedHeader>content-type</AllowedHeader>"
        "<ExposeHeader>ETag</ExposeHeader><ID>site</ID><MaxAgeSeconds>3000</MaxAgeSeconds>",
    ), rule()))
    assert config == {"rules": [
        {"id": "site", "allowedOrigins": ["https://app.example.com", "http://*.example.com"],
         "allowedMethods": ["GET", "PUT"], "allowedHeaders": ["X-Amz-*", "content-type"],
         "exposeHeaders": ["ETag"], "maxAgeSeconds": 3000},
        {"id": None, "allowedOrigins": ["*"], "allowedMethods": ["GET"], "allowedHeaders": [],
         "exposeHeaders": [], "maxAgeSeconds": None},
    ]}


def test_rendering_gives_back_what_was_parsed() -> None:
    body = doc(rule(("https://a.example", ""), ("HEAD", "DELETE", "POST"),
                    "<AllowedHeader>*</AllowedHeader><ExposeHeader>x-amz-version-id</ExposeHeader>"
                    "<ID>r &amp; s</ID><MaxAgeSeconds>0</MaxAgeSeconds>"))
    config = parse_cors(body)
    assert parse_cors(cors_xml(config)) == config
    assert b"<ID>r &amp; s</ID>" in cors_xml(config)
    assert config["rules"][0]["allowedOrigins"] == ["https://a.example", ""]  # S3 keeps an empty origin


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ("<CORSConfiguration/>", "MalformedXML", None),
        ("<CORSConfiguration><CORSRule/></CORSConfiguration>", "MalformedXML", None),
        (doc(rule(origins=())), "MalformedXML", None),
        (doc(rule(methods=())), "MalformedXML", None),
        (doc(rule(extra="<Unknown>x</Unknown>")), "MalformedXML", None),
        (doc(rule(extra="<ID>a</ID><ID>b</ID>")), "MalformedXML", None),
        (doc(rule(extra="<MaxAgeSeconds>soon</MaxAgeSeconds>")), "MalformedXML", None),
        # digits int() refuses ("²" was a 500), other scripts' digits, beyond AWS's Integer
        (doc(rule(extra="<MaxAgeSeconds>\u00b2</MaxAgeSeconds>")), "MalformedXML", None),
        (doc(rule(extra="<MaxAgeSeconds>\u0663</MaxAgeSeconds>")), "MalformedXML", None),
        (doc(rule(extra="<MaxAgeSeconds>2147483648</MaxAgeSeconds>")), "MalformedXML", None),
        (doc(rule(extra="<MaxAgeSeconds>18446744073709551616</MaxAgeSeconds>")), "MalformedXML", None),
        ("<LifecycleConfiguration/>", "MalformedXML", None),
        ("<CORSConfiguration><Rule/></CORSConfiguration>", "MalformedXML", None),
        ("not xml", "MalformedXML", None),
        (doc(*[rule()] * 101), "MalformedXML", None),
        (doc(rule(methods=("GET", "OPTIONS"))), "InvalidRequest",
         "Found unsupported HTTP method in CORS config. Unsupported method is OPTIONS"),
        (doc(rule(methods=("get",))), "InvalidRequest",
         "Found unsupported HTTP method in CORS config. Unsupported method is get"),
        (doc(rule(methods=("",))), "InvalidRequest",
         "Found unsupported HTTP method in CORS config. Unsupported method is "),
        (doc(rule(origins=("*example*.com",))), "InvalidRequest",
         'AllowedOrigin "*example*.com" can not have more than one wildcard.'),
        (doc(rule(extra="<AllowedHeader>x-*-*</AllowedHeader>")), "InvalidRequest",
         'AllowedHeader "x-*-*" can not have more than one wildcard.'),
        (doc(rule(extra="<ExposeHeader>x-amz-*</ExposeHeader>")), "InvalidRequest", None),
        # echoed as a header: CR/LF, spaces, a colon cannot be in a header name
        (doc(rule(extra="<ExposeHeader>x-a&#13;&#10;X-Injected: 1</ExposeHeader>")), "InvalidRequest",
         r"ExposeHeader 'x-a\r\nX-Injected: 1' is not a header name."),
        (doc(rule(extra="<ExposeHeader>ETag, x-amz-version-id</ExposeHeader>")), "InvalidRequest", None),
        (doc(rule(extra="<ExposeHeader></ExposeHeader>")), "InvalidRequest", None),
        (doc(rule(extra="<MaxAgeSeconds>-1</MaxAgeSeconds>")), "InvalidRequest", None),
        (doc(rule(extra=f"<ID>{'x' * 256}</ID>")), "InvalidArgument", None),
    ],
)
def test_invalid_configurations_get_aws_errors(body: str, code: str, message: str | None) -> None:
    got_code, got_message = error_of(body)
    assert got_code == code
    if message is not None:
        assert got_message == message


def test_a_hundred_rules_and_a_255_character_id_are_allowed() -> None:
    assert len(parse_cors(doc(*[rule()] * 100))["rules"]) == 100
    assert parse_cors(doc(rule(extra=f"<ID>{'x' * 255}</ID>")))["rules"][0]["id"] == "x" * 255


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("https://a.example", "https://a.example", True),
        ("https://a.example", "https://a.example/", False),  # a trailing slash is another origin
        ("https://a.example", "http://a.example", False),
        ("https://a.example", "https://a.example:443", False),
        ("https://a.example", "HTTPS://A.EXAMPLE", False),
        ("http://*.example.com", "http://test.example.com", True),
        ("http://*.example.com", "http://a.b.example.com", True),
        ("http://*.example.com", "http://example.com", False),
        ("http://*.example.com", "https://test.example.com", False),
        ("*suffix", "foo.suffix", True),
        ("*suffix", "foo.suffix.get", False),
        ("start*end", "startend", True),  # `*` matches the empty run (ceph s3-tests)
        ("start*end", "start12end", True),
        ("start*end", "0start12end", False),
        ("prefix*", "prefix", True),
        ("prefix*", "bla.prefix", False),
        ("ab*ba", "aba", False),  # prefix and suffix may not overlap
        ("*", "anything", True),
    ],
)
def test_wildcard_match(pattern: str, value: str, matches: bool) -> None:
    assert wildcard_match(pattern, value) is matches


def test_requested_headers_are_lower_cased_in_order() -> None:
    assert requested_headers("X-AMZ-date, Content-Type,,authorization ") == ["x-amz-date", "content-type", "authorization"]
    assert requested_headers(None) == [] and requested_headers("") == []


CONFIG = parse_cors(doc(
    rule(("https://app.example.com",), ("GET", "PUT"),
         "<AllowedHeader>Content-Type</AllowedHeader><AllowedHeader>x-amz-*</AllowedHeader>"
         "<ExposeHeader>ETag</ExposeHeader><ID>app</ID><MaxAgeSeconds>600</MaxAgeSeconds>"),
    rule(("http://*.example.org",), ("POST",), "<ID>org</ID>"),
    rule(("*",), ("GET", "HEAD"), "<ID>everyone</ID>"),
))


def _id(found: dict[str, object] | None) -> object:
    return None if found is None else found["id"]


@pytest.mark.parametrize(
    ("origin", "method", "headers", "expected"),
    [
        ("https://app.example.com", "PUT", [], "app"),
        ("https://app.example.com", "GET", [], "app"),  # first match wins over "everyone"
        ("https://app.example.com", "PUT", ["content-type", "x-amz-date"], "app"),
        ("https://app.example.com", "PUT", ["x-amz-"], "app"),
        ("https://app.example.com", "PUT", ["authorization"], None),
        ("https://app.example.com", "GET", ["authorization"], None),  # "everyone" allows no header
        ("https://app.example.com", "DELETE", [], None),
        ("https://app.example.com", "HEAD", [], "everyone"),
        ("http://www.example.org", "POST", [], "org"),
        ("https://www.example.org", "POST", [], None),
        ("https://evil.example", "GET", [], "everyone"),
        ("https://evil.example", "PUT", [], None),
    ],
)
def test_find_rule_takes_the_first_rule_allowing_origin_method_and_headers(
    origin: str, method: str, headers: list[str], expected: str | None
) -> None:
    assert _id(find_rule(CONFIG, origin, method, headers)) == expected


def test_no_configuration_matches_nothing() -> None:
    assert find_rule(None, "https://a.example", "GET", []) is None


def test_a_specific_origin_is_echoed_with_credentials() -> None:
    found = find_rule(CONFIG, "https://app.example.com", "PUT", ["content-type"])
    assert found is not None
    assert response_headers(found, "https://app.example.com", ["content-type"]) == {
        "access-control-allow-origin": "https://app.example.com",
        "access-control-allow-credentials": "true",
        "access-control-allow-methods": "GET, PUT",
        "access-control-allow-headers": "content-type",
        "access-control-expose-headers": "ETag",
        "access-control-max-age": "600",
        "vary": VARY,
    }


def test_an_any_origin_rule_answers_a_star_without_credentials() -> None:
    found = find_rule(CONFIG, "https://evil.example", "HEAD", [])
    assert found is not None
    assert response_headers(found, "https://evil.example", []) == {
        "access-control-allow-origin": "*",
        "access-control-allow-methods": "GET, HEAD",
        "vary": VARY,
    }
