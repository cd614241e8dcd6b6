"""Lifecycle configuration: AWS validation rules, faithful round trips, rule matching and
lifecycle-day arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crossbeat.s3.errors import S3Error
from crossbeat.s3.lifecycle_config import (
    abort_headers,
    current_expiry,
    days_after,
    epoch,
    expiration_header,
    lifecycle_xml,
    parse_lifecycle,
    rule_matches,
)
from crossbeat.s3.objectmeta import require_checksum

DAY = 86400.0


def doc(*rules: str) -> str:
    return "<LifecycleConfiguration>" + "".join(rules) + "</LifecycleConfiguration>"


def rule(body: str, *, rule_id: str = "r", status: str = "Enabled", flt: str = "<Filter/>") -> str:
    return f"<Rule><ID>{rule_id}</ID>{flt}<Status>{status}</Status>{body}</Rule>"


EXPIRE_1 = "<Expiration><Days>1</Days></Expiration>"


def code_of(body: str) -> str:
    with pytest.raises(S3Error) as exc:
        parse_lifecycle(body)
    return exc.value.code


# -- validation ---------------------------------------------------------------------------


def test_a_full_rule_parses_and_renders_back() -> None:
    body = doc(rule(
        "<Expiration><Days>30</Days></Expiration>"
        "<NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays>"
        "<NewerNoncurrentVersions>3</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
        flt="<Filter><And><Prefix>logs/</Prefix><Tag><Key>a</Key><Value>1</Value></Tag>"
            "<ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>"
            "<ObjectSizeLessThan>100</ObjectSizeLessThan></And></Filter>",
    ))
    config = parse_lifecycle(body)
    (r,) = config["rules"]
    assert r["prefix"] == "logs/"
    assert r["filter"] == {"form": "And", "prefix": "logs/", "tags": [["a", "1"]], "gt": 10, "lt": 100}
    assert r["expiration"] == {"days": 30}
    assert r["noncurrent"] == {"days": 7, "newer": 3}
    assert parse_lifecycle(lifecycle_xml(config)) == config


@pytest.mark.parametrize(
    "flt",
    [
        "<Filter/>",
        "<Filter><Prefix>a/</Prefix></Filter>",
        "<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>",
        "<Filter><ObjectSizeGreaterThan>5</ObjectSizeGreaterThan></Filter>",
        "<Filter><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter>",
        "<Prefix>legacy/</Prefix>",
    ],
)
def test_every_filter_form_round_trips(flt: str) -> None:
    config = parse_lifecycle(doc(rule(EXPIRE_1, flt=flt)))
    assert parse_lifecycle(lifecycle_xml(config)) == config


@pytest.mark.parametrize(
    "expiration",
    [
        "<Days>2</Days>",
        "<Date>2030-01-01T00:00:00Z</Date>",
        "<ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>",
        "<ExpiredObjectDeleteMarker>false</ExpiredObjectDeleteMarker>",
    ],
)
def test_every_expiration_form_round_trips(expiration: str) -> None:
    config = parse_lifecycle(doc(rule(f"<Expiration>{expiration}</Expiration>")))
    assert parse_lifecycle(lifecycle_xml(config)) == config


def test_abort_and_generated_ids() -> None:
    body = doc(
        "<Rule><Filter><Prefix>u/</Prefix></Filter><Status>Disabled</Status>"
        "<AbortIncompleteMultipartUpload><DaysAfterInitiation>3</DaysAfterInitiation>"
        "</AbortIncompleteMultipartUpload></Rule>",
        rule(EXPIRE_1, rule_id="named"),
    )
    first, second = parse_lifecycle(body)["rules"]
    assert first["abortDays"] == 3 and first["status"] == "Disabled"
    assert first["id"] and first["id"] != "named" and second["id"] == "named"


def test_dates_are_normalised_to_midnight_utc_with_milliseconds() -> None:
    config = parse_lifecycle(doc(rule("<Expiration><Date>2030-01-01T00:00:00.000Z</Date></Expiration>")))
    assert config["rules"][0]["expiration"] == {"date": "2030-01-01T00:00:00.000Z"}
    assert code_of(doc(rule("<Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration>"))) == "InvalidArgument"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("<LifecycleConfiguration/>", "MalformedXML"),
        ("<NotLifecycle/>", "MalformedXML"),
        (doc(rule(EXPIRE_1, status="On")), "MalformedXML"),
        (doc(rule(EXPIRE_1, flt="")), "MalformedXML"),
        (doc(rule(EXPIRE_1, flt="<Prefix/><Filter/>")), "MalformedXML"),
        (doc(rule(EXPIRE_1, flt="<Filter><Prefix>a</Prefix><ObjectSizeLessThan>3</ObjectSizeLessThan></Filter>")),
         "MalformedXML"),
        (doc(rule(EXPIRE_1 + "<Bogus/>")), "MalformedXML"),
        (doc(rule(EXPIRE_1 + EXPIRE_1)), "MalformedXML"),
        (doc(rule("<Expiration><Days>1</Days><Date>2030-01-01T00:00:00Z</Date></Expiration>")), "MalformedXML"),
        (doc(rule("<Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>"
                  "</Expiration>")), "MalformedXML"),
        (doc(rule("<Expiration><Days>x</Days></Expiration>")), "MalformedXML"),
        (doc(rule("<Expiration><Days>\u00b2</Days></Expiration>")), "MalformedXML"),  # was a 500
        (doc(rule("<Expiration><Days>\u0663</Days></Expiration>")), "MalformedXML"),
        (doc(rule(EXPIRE_1, flt="<Filter><ObjectSizeGreaterThan>\u00b2</ObjectSizeGreaterThan></Filter>")),
         "MalformedXML"),
        (doc(rule("<NoncurrentVersionExpiration/>")), "MalformedXML"),
        (doc(rule("<Expiration><Days>0</Days></Expiration>")), "InvalidArgument"),
        (doc(rule("<Expiration><Days>-1</Days></Expiration>")), "InvalidArgument"),
        (doc(rule("<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays></NoncurrentVersionExpiration>")),
         "InvalidArgument"),
        (doc(rule("<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
                  "<NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration>")),
         "InvalidArgument"),
        (doc(rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation>"
                  "</AbortIncompleteMultipartUpload>")), "InvalidArgument"),
        (doc(rule(EXPIRE_1, rule_id="x" * 256)), "InvalidArgument"),
        (doc(rule(EXPIRE_1), rule(EXPIRE_1)), "InvalidArgument"),
        (doc(rule("")), "InvalidRequest"),
        (doc(rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
                  "</AbortIncompleteMultipartUpload>",
                  flt="<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>")), "InvalidRequest"),
        (doc(rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
                  "</AbortIncompleteMultipartUpload>",
                  flt="<Filter><ObjectSizeLessThan>9</ObjectSizeLessThan></Filter>")), "InvalidRequest"),
        (doc(rule("<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>",
                  flt="<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>")), "InvalidRequest"),
        (doc(rule(EXPIRE_1, flt="<Filter><And><ObjectSizeGreaterThan>9</ObjectSizeGreaterThan>"
                                "<ObjectSizeLessThan>9</ObjectSizeLessThan></And></Filter>")), "InvalidRequest"),
        (doc(rule(EXPIRE_1, flt="<Filter><And><Tag><Key>k</Key><Value>1</Value></Tag>"
                                "<Tag><Key>k</Key><Value>2</Value></Tag></And></Filter>")), "InvalidRequest"),
        (doc(*[rule(EXPIRE_1, rule_id=str(i)) for i in range(1001)]), "InvalidRequest"),
        (doc(rule("<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>")),
         "NotImplemented"),
        (doc(rule(EXPIRE_1 + "<NoncurrentVersionTransition><NoncurrentDays>1</NoncurrentDays>"
                  "<StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>")), "NotImplemented"),
    ],
)
def test_invalid_configurations_get_the_aws_error(body: str, code: str) -> None:
    assert code_of(body) == code


def test_a_transition_refusal_names_the_element() -> None:
    with pytest.raises(S3Error) as exc:
        parse_lifecycle(doc(rule(EXPIRE_1 + "<NoncurrentVersionTransition><NoncurrentDays>1</NoncurrentDays>"
                                 "<StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>")))
    assert exc.value.status == 501
    assert "NoncurrentVersionTransition" in exc.value.message


def test_a_thousand_rules_are_accepted() -> None:
    assert len(parse_lifecycle(doc(*[rule(EXPIRE_1, rule_id=str(i)) for i in range(1000)]))["rules"]) == 1000


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({"content-md5": "x"}, True),
        ({"x-amz-checksum-crc32": "AAAAAA=="}, True),
        ({"x-amz-trailer": "x-amz-checksum-crc32c"}, True),
        ({"x-amz-sdk-checksum-algorithm": "CRC32"}, False),
        ({}, False),
    ],
)
def test_put_needs_content_md5_or_a_checksum(headers: dict[str, str], ok: bool) -> None:
    if ok:
        require_checksum(headers)
        return
    with pytest.raises(S3Error) as exc:
        require_checksum(headers)
    assert exc.value.code == "InvalidRequest"


# -- matching -------------------------------------------------------------------------------


def _rule(flt: str) -> dict:  # type: ignore[type-arg]
    return parse_lifecycle(doc(rule(EXPIRE_1, flt=flt)))["rules"][0]  # type: ignore[no-any-return]


def test_prefix_tag_and_size_filters_select_exactly() -> None:
    r = _rule("<Filter><And><Prefix>logs/</Prefix><Tag><Key>t</Key><Value>x</Value></Tag>"
              "<ObjectSizeGreaterThan>10</ObjectSizeGreaterThan><ObjectSizeLessThan>20</ObjectSizeLessThan>"
              "</And></Filter>")
    assert rule_matches(r, "logs/a", {"t": "x", "o": "y"}, 15)
    assert not rule_matches(r, "other/a", {"t": "x"}, 15)
    assert not rule_matches(r, "logs/a", {"t": "y"}, 15)
    assert not rule_matches(r, "logs/a", {}, 15)
    assert not rule_matches(r, "logs/a", {"t": "x"}, 10)  # strictly greater
    assert not rule_matches(r, "logs/a", {"t": "x"}, 20)  # strictly less
    assert not rule_matches(r, "logs/a", {"t": "x"}, None)  # an upload has no size
    legacy = _rule("<Prefix>p</Prefix>")
    assert rule_matches(legacy, "p1", None, 0) and not rule_matches(legacy, "q", None, 0)


def test_a_disabled_rule_matches_nothing() -> None:
    r = parse_lifecycle(doc(rule(EXPIRE_1, status="Disabled")))["rules"][0]
    assert not rule_matches(r, "k", {}, 1)


# -- days ---------------------------------------------------------------------------------


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_days_round_up_to_the_next_midnight_utc() -> None:
    # AWS's own example: created 2014-01-15 10:30 UTC, 3 days -> 2014-01-19 00:00 UTC
    assert days_after(_ts("2014-01-15T10:30:00"), 3, DAY) == _ts("2014-01-19T00:00:00")
    # already at midnight: no extra day
    assert days_after(_ts("2014-01-15T00:00:00"), 1, DAY) == _ts("2014-01-16T00:00:00")
    assert days_after(_ts("2014-01-15T23:59:59.999"), 1, DAY) == _ts("2014-01-17T00:00:00")


def test_a_shortened_day_rounds_to_its_own_boundaries() -> None:
    assert days_after(100.5, 1, 1.0) == 102.0
    assert days_after(100.0, 2, 1.0) == 102.0
    assert days_after(95.0, 1, 10.0) == 110.0


def test_current_expiry_takes_the_earliest_matching_rule() -> None:
    config = parse_lifecycle(doc(
        rule("<Expiration><Days>10</Days></Expiration>", rule_id="ten"),
        rule("<Expiration><Days>2</Days></Expiration>", rule_id="two",
             flt="<Filter><Prefix>a/</Prefix></Filter>"),
        rule("<Expiration><Days>1</Days></Expiration>", rule_id="off", status="Disabled"),
        rule("<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>",
             rule_id="eodm"),
    ))
    created = "2014-01-15T10:30:00.000Z"
    assert current_expiry(config, "a/x", {}, 1, created, DAY) == (_ts("2014-01-18T00:00:00"), "two")
    assert current_expiry(config, "b/x", {}, 1, created, DAY) == (_ts("2014-01-26T00:00:00"), "ten")
    dated = parse_lifecycle(doc(rule("<Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration>")))
    assert current_expiry(dated, "k", {}, 1, created, DAY) == (_ts("2030-01-01T00:00:00"), "r")
    assert current_expiry(None, "k", {}, 1, created, DAY) is None
    assert epoch(created) == _ts("2014-01-15T10:30:00")


def test_the_expiration_header_names_the_earliest_rule_for_current_versions_only() -> None:
    config = parse_lifecycle(doc(
        rule("<Expiration><Days>3</Days></Expiration>", rule_id="a b/c"),
        rule("<Expiration><Date>2014-01-17T00:00:00Z</Date></Expiration>", rule_id="dated",
             flt="<Filter><Prefix>d</Prefix></Filter>"),
    ))
    meta = {"key": "k", "size": 1, "tags": {}, "lastModified": "2014-01-15T10:30:00.000Z", "isLatest": True}
    assert expiration_header(config, meta, DAY) == 'expiry-date="Sun, 19 Jan 2014 00:00:00 GMT", rule-id="a%20b%2Fc"'
    assert expiration_header(config, {**meta, "key": "dk"}, DAY) == (
        'expiry-date="Fri, 17 Jan 2014 00:00:00 GMT", rule-id="dated"')
    assert expiration_header(config, {**meta, "isLatest": False}, DAY) is None
    assert expiration_header(config, {**meta, "isDeleteMarker": True}, DAY) is None
    assert expiration_header(None, meta, DAY) is None


def test_abort_headers_name_the_earliest_matching_enabled_abort_rule() -> None:
    abort = "<AbortIncompleteMultipartUpload><DaysAfterInitiation>{}</DaysAfterInitiation></AbortIncompleteMultipartUpload>"
    config = parse_lifecycle(doc(
        rule(abort.format(7), rule_id="late", flt="<Filter><Prefix>up/</Prefix></Filter>"),
        rule(abort.format(1), rule_id="off", status="Disabled"),
        rule(abort.format(2), rule_id="règle 2", flt="<Filter><Prefix>up/soon</Prefix></Filter>"),
    ))
    initiated = "2026-03-01T10:00:00.000Z"
    assert abort_headers(config, "up/a", initiated, DAY) == {
        "x-amz-abort-date": "Mon, 09 Mar 2026 00:00:00 GMT", "x-amz-abort-rule-id": "late"}
    # the earlier rule wins; an id a header cannot carry as is goes URL-encoded
    assert abort_headers(config, "up/soon", initiated, DAY) == {
        "x-amz-abort-date": "Wed, 04 Mar 2026 00:00:00 GMT", "x-amz-abort-rule-id": "r%C3%A8gle%202"}
    assert abort_headers(config, "elsewhere", initiated, DAY) == {}
    assert abort_headers(None, "up/a", initiated, DAY) == {}


@pytest.mark.parametrize("body", [
    rule(f"<Expiration><Days>{2**31}</Days></Expiration>"),
    rule(f"<NoncurrentVersionExpiration><NoncurrentDays>{2**31}</NoncurrentDays></NoncurrentVersionExpiration>"),
    rule(f"<AbortIncompleteMultipartUpload><DaysAfterInitiation>{2**31}</DaysAfterInitiation>"
         "</AbortIncompleteMultipartUpload>"),
    rule(EXPIRE_1, flt=f"<Filter><ObjectSizeGreaterThan>{2**63}</ObjectSizeGreaterThan></Filter>"),
    rule(EXPIRE_1, flt=f"<Filter><ObjectSizeLessThan>{2**64}</ObjectSizeLessThan></Filter>"),
])
def test_numbers_past_s3s_integer_and_long_are_invalid(body: str) -> None:
    """S3's Days are an Integer, its sizes a Long. Larger ones were stored: past 2^63 the
    store refused the document (a 500); below that, a date past year 9999 made every GET,
    HEAD and PUT of the objects the rule applied to a 500."""
    assert code_of(doc(body)) == "InvalidArgument"


def test_a_date_past_year_9999_goes_unsaid_in_the_headers() -> None:
    """Days within S3's Integer may still end past what an HTTP date can say: no header
    then (nothing expires before it); formatting it was a ValueError, a 500."""
    config = parse_lifecycle(doc(
        rule(f"<Expiration><Days>{2**31 - 1}</Days></Expiration>"),
        rule(f"<AbortIncompleteMultipartUpload><DaysAfterInitiation>{2**31 - 1}</DaysAfterInitiation>"
             "</AbortIncompleteMultipartUpload>", rule_id="abort"),
    ))
    meta = {"key": "k", "size": 1, "tags": {}, "lastModified": "2026-01-15T10:30:00.000Z", "isLatest": True}
    assert expiration_header(config, meta, DAY) is None
    assert abort_headers(config, "k", "2026-03-01T10:00:00.000Z", DAY) == {}
