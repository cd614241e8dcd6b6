"""Replication configuration: AWS validation rules, faithful round trips, rule matching."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

import pytest

from crossbeat.s3.errors import S3Error
from crossbeat.s3.replication_config import (
    destination_sites,
    matching_rules,
    parse_replication,
    replication_xml,
)
from crossbeat.s3.xmldoc import NS

N = "{" + NS + "}"
ROLE = "arn:aws:iam::123456789012:role/r"

# Verbatim from s3-wire-captures/captures/put_replication/001.txt
BOTO_BODY = b'<ReplicationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Role>arn:aws:iam::123456789012:role/r</Role><Rule><ID>r1</ID><Priority>1</Priority><Status>Enabled</Status><Filter><Prefix>logs/</Prefix></Filter><DeleteMarkerReplication><Status>Disabled</Status></DeleteMarkerReplication><Destination><Bucket>arn:aws:s3:::dest</Bucket><StorageClass>STANDARD</StorageClass></Destination></Rule></ReplicationConfiguration>'


def rule(
    *,
    rule_id: str | None = "r",
    priority: str | None = "1",
    status: str = "Enabled",
    prefix: str | None = None,
    filter_xml: str | None = "<Filter><Prefix>p/</Prefix></Filter>",
    dmr: str | None = "Disabled",
    bucket: str = "arn:aws:s3:::dest",
    storage_class: str | None = "site-b",
    extra: str = "",
    destination_extra: str = "",
) -> str:
    parts = []
    if rule_id is not None:
        parts.append(f"<ID>{rule_id}</ID>")
    if priority is not None:
        parts.append(f"<Priority>{priority}</Priority>")
    if prefix is not None:
        parts.append(f"<Prefix>{prefix}</Prefix>")
    if filter_xml is not None:
        parts.append(filter_xml)
    parts.append(f"<Status>{status}</Status>")
    parts.append(extra)
    if dmr is not None:
        parts.append(f"<DeleteMarkerReplication><Status>{dmr}</Status></DeleteMarkerReplication>")
    sc = f"<StorageClass>{storage_class}</StorageClass>" if storage_class is not None else ""
    parts.append(f"<Destination><Bucket>{bucket}</Bucket>{sc}{destination_extra}</Destination>")
    return "<Rule>" + "".join(parts) + "</Rule>"


def v1_rule(rule_id: str = "r", prefix: str = "p/", **kw: Any) -> str:
    return rule(rule_id=rule_id, priority=None, prefix=prefix, filter_xml=None, dmr=None, **kw)


def config(*rules: str, role: str | None = ROLE, namespace: bool = True) -> bytes:
    ns = f' xmlns="{NS}"' if namespace else ""
    role_xml = f"<Role>{role}</Role>" if role is not None else ""
    return f"<ReplicationConfiguration{ns}>{role_xml}{''.join(rules)}</ReplicationConfiguration>".encode()


def code_of(body: bytes, versioning: str = "Enabled") -> str:
    with pytest.raises(S3Error) as info:
        parse_replication(body, versioning)
    return info.value.code


# -- what clients send -----------------------------------------------------------------------


def test_boto3_capture_parses_and_round_trips() -> None:
    parsed = parse_replication(BOTO_BODY, "Enabled")
    assert parsed["role"] == ROLE
    (r,) = parsed["rules"]
    assert (r["id"], r["priority"], r["status"], r["schema"]) == ("r1", 1, "Enabled", "V2")
    assert r["filter"] == {"form": "Prefix", "prefix": "logs/", "tags": []}
    assert r["deleteMarkerReplication"] == "Disabled"
    assert r["destination"]["bucket"] == "arn:aws:s3:::dest"
    assert r["destination"]["bucketName"] == "dest"
    assert destination_sites(r) == ["STANDARD"]
    assert parse_replication(replication_xml(parsed), "Enabled") == parsed


def test_every_filter_form_and_extras_round_trip() -> None:
    body = config(
        rule(rule_id="all", priority="1", filter_xml="<Filter/>"),
        rule(rule_id="empty-prefix", priority="2", filter_xml="<Filter><Prefix></Prefix></Filter>"),
        rule(
            rule_id="tag",
            priority="3",
            filter_xml="<Filter><Tag><Key>team</Key><Value>a b</Value></Tag></Filter>",
        ),
        rule(
            rule_id="and",
            priority="4",
            filter_xml="<Filter><And><Prefix>x/</Prefix><Tag><Key>k1</Key><Value>v1</Value></Tag><Tag><Key>k2</Key><Value></Value></Tag></And></Filter>",
            extra="<ExistingObjectReplication><Status>Enabled</Status></ExistingObjectReplication>"
            "<SourceSelectionCriteria><ReplicaModifications><Status>Enabled</Status></ReplicaModifications></SourceSelectionCriteria>",
            destination_extra="<Account>123456789012</Account><ReplicationTime><Status>Enabled</Status><Time><Minutes>15</Minutes></Time></ReplicationTime><Metrics><Status>Enabled</Status><EventThreshold><Minutes>15</Minutes></EventThreshold></Metrics>",
        ),
        rule(
            rule_id="plain-and",
            priority="5",
            filter_xml="<Filter><And><Prefix>y/</Prefix></And></Filter>",
            dmr="Enabled",
        ),
    )
    parsed = parse_replication(body, "Enabled")
    rendered = replication_xml(parsed)
    assert parse_replication(rendered, "Enabled") == parsed
    root = ET.fromstring(rendered)
    rules = root.findall(N + "Rule")
    assert [r.findtext(N + "ID") for r in rules] == [
        "all",
        "empty-prefix",
        "tag",
        "and",
        "plain-and",
    ]
    filters = [r.find(N + "Filter") for r in rules]
    assert filters[0] is not None and len(filters[0]) == 0
    assert filters[1] is not None and filters[1].findtext(N + "Prefix") == ""
    assert [t.findtext(N + "Key") for t in rules[3].iter(N + "Tag")] == ["k1", "k2"]
    assert rules[3].findtext(f"{N}Destination/{N}ReplicationTime/{N}Time/{N}Minutes") == "15"
    assert rules[3].findtext(f"{N}Destination/{N}Account") == "123456789012"
    assert rules[3].findtext(f"{N}ExistingObjectReplication/{N}Status") == "Enabled"
    assert parsed["rules"][3]["prefix"] == "x/"
    assert parsed["rules"][3]["filter"]["tags"] == [["k1", "v1"], ["k2", ""]]


def test_v1_rules_round_trip_without_namespace() -> None:
    body = config(v1_rule("a", "logs/"), v1_rule("b", "img/", status="Disabled"), namespace=False)
    parsed = parse_replication(body, "Enabled")
    assert [(r["schema"], r["prefix"], r["priority"], r["filter"]) for r in parsed["rules"]] == [
        ("V1", "logs/", None, None),
        ("V1", "img/", None, None),
    ]
    root = ET.fromstring(replication_xml(parsed))
    assert [r.findtext(N + "Prefix") for r in root.findall(N + "Rule")] == ["logs/", "img/"]
    assert root.find(f"{N}Rule/{N}Filter") is None
    assert parse_replication(replication_xml(parsed), "Enabled") == parsed


def test_missing_ids_are_generated_unique() -> None:
    parsed = parse_replication(
        config(
            rule(rule_id=None, priority="1"),
            rule(rule_id=None, priority="2"),
            rule(rule_id="x", priority="3"),
        ),
        "Enabled",
    )
    ids = [r["id"] for r in parsed["rules"]]
    assert all(ids) and len(set(ids)) == 3 and ids[2] == "x"
    assert parse_replication(replication_xml(parsed), "Enabled") == parsed


def test_two_roles_backbeat_style() -> None:
    roles = f"{ROLE},arn:aws:iam::210987654321:role/dst"
    assert parse_replication(config(rule(), role=roles), "Enabled")["role"] == roles


# -- AWS validation rules --------------------------------------------------------------------


@pytest.mark.parametrize("versioning", ["", "Suspended"])
def test_source_versioning_must_be_enabled(versioning: str) -> None:
    assert code_of(config(rule()), versioning) == "InvalidRequest"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        # V2 needs Priority and DeleteMarkerReplication
        (config(rule(priority=None)), "InvalidRequest"),
        (config(rule(dmr=None)), "InvalidRequest"),
        # tag filters need DeleteMarkerReplication Disabled
        (
            config(
                rule(
                    filter_xml="<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>",
                    dmr="Enabled",
                )
            ),
            "InvalidRequest",
        ),
        (
            config(
                rule(
                    filter_xml="<Filter><And><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter>",
                    dmr="Enabled",
                )
            ),
            "InvalidRequest",
        ),
        # unique IDs and priorities
        (
            config(rule(rule_id="x", priority="1"), rule(rule_id="x", priority="2")),
            "InvalidArgument",
        ),
        (
            config(rule(rule_id="x", priority="1"), rule(rule_id="y", priority="1")),
            "InvalidRequest",
        ),
        (config(rule(rule_id="x" * 256)), "InvalidArgument"),
        # V1 and V2 rules cannot be mixed; V1 rules cannot overlap or use several buckets
        (config(rule(rule_id="a"), v1_rule("b")), "InvalidRequest"),
        (config(v1_rule("a", "logs/"), v1_rule("b", "logs/2026/")), "InvalidRequest"),
        (config(v1_rule("a", ""), v1_rule("b", "x")), "InvalidRequest"),
        (
            config(v1_rule("a", "a/"), v1_rule("b", "b/", bucket="arn:aws:s3:::other")),
            "InvalidRequest",
        ),
        # Prefix and Filter together, neither, or a Filter with two predicates
        (config(rule(prefix="p/")), "MalformedXML"),
        (config(rule(filter_xml=None)), "MalformedXML"),
        (
            config(
                rule(
                    filter_xml="<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></Filter>"
                )
            ),
            "MalformedXML",
        ),
        (config(rule(filter_xml="<Filter><Bogus/></Filter>")), "MalformedXML"),
        (config(rule(filter_xml="<Filter><And></And></Filter>")), "MalformedXML"),
        (config(rule(filter_xml="<Filter><Tag><Key>k</Key></Tag></Filter>")), "MalformedXML"),
        (
            config(
                rule(
                    filter_xml="<Filter><And><Tag><Key>k</Key><Value>1</Value></Tag><Tag><Key>k</Key><Value>2</Value></Tag></And></Filter>"
                )
            ),
            "InvalidArgument",
        ),
        # Status, Priority, DeleteMarkerReplication values
        (config(rule(status="On")), "MalformedXML"),
        (config(rule(priority="high")), "MalformedXML"),
        (config(rule(priority="-1")), "InvalidArgument"),
        (config(rule(dmr="Yes")), "MalformedXML"),
        # Destination
        (config(rule(bucket="dest")), "InvalidArgument"),
        (config(rule(bucket="arn:aws:s3:::")), "InvalidArgument"),
        (config(rule(bucket="")), "MalformedXML"),
        (config(rule(storage_class=" ")), "InvalidArgument"),
        (
            config(
                "<Rule><ID>r</ID><Priority>1</Priority><Filter/><Status>Enabled</Status><DeleteMarkerReplication><Status>Disabled</Status></DeleteMarkerReplication></Rule>"
            ),
            "MalformedXML",
        ),
        # Role, rules
        (config(rule(), role=None), "MalformedXML"),
        (config(rule(), role="role/r"), "InvalidArgument"),
        (config(rule(), role=f"{ROLE},{ROLE},{ROLE}"), "InvalidArgument"),
        (config(), "MalformedXML"),
        (b"<VersioningConfiguration/>", "MalformedXML"),
        (
            b'<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><ReplicationConfiguration><Role>&x;</Role></ReplicationConfiguration>',
            "MalformedXML",
        ),
    ],
)
def test_aws_validation(body: bytes, code: str) -> None:
    assert code_of(body) == code


def test_at_most_1000_rules() -> None:
    def body(n: int) -> bytes:
        return config(*(rule(rule_id=f"r{i}", priority=str(i)) for i in range(n)))

    assert len(parse_replication(body(1000), "Enabled")["rules"]) == 1000
    assert code_of(body(1001)) == "InvalidRequest"


# -- matching --------------------------------------------------------------------------------


def test_matching_rules_by_prefix_tags_status_and_priority() -> None:
    parsed = parse_replication(
        config(
            rule(
                rule_id="logs-low",
                priority="1",
                filter_xml="<Filter><Prefix>logs/</Prefix></Filter>",
                storage_class="a",
            ),
            rule(
                rule_id="logs-high",
                priority="9",
                filter_xml="<Filter><Prefix>logs/app</Prefix></Filter>",
                storage_class=" b , c ,",
            ),
            rule(
                rule_id="tagged",
                priority="5",
                filter_xml="<Filter><And><Prefix>logs/</Prefix><Tag><Key>t</Key><Value>1</Value></Tag></And></Filter>",
                storage_class="d",
            ),
            rule(rule_id="off", priority="7", status="Disabled", filter_xml="<Filter/>"),
            rule(rule_id="any", priority="3", filter_xml="<Filter/>"),
        ),
        "Enabled",
    )

    def ids(key: str, tags: dict[str, str] | None = None) -> list[str]:
        return [r["id"] for r in matching_rules(parsed, key, tags)]

    assert ids("logs/app.log") == ["logs-high", "any", "logs-low"]
    assert ids("logs/app.log", {"t": "1"}) == ["logs-high", "tagged", "any", "logs-low"]
    assert ids("logs/x", {"t": "2"}) == ["any", "logs-low"]
    assert ids("other") == ["any"]
    by_id = {r["id"]: r for r in parsed["rules"]}
    assert destination_sites(by_id["logs-high"]) == ["b", "c"]
    assert destination_sites(by_id["logs-low"]) == ["a"]
    assert destination_sites(by_id["tagged"]) == ["d"]
    assert matching_rules(None, "k", {}) == []


def test_v1_rules_match_by_prefix_in_document_order() -> None:
    parsed = parse_replication(config(v1_rule("b", "b/"), v1_rule("a", "a/")), "Enabled")
    assert [r["id"] for r in matching_rules(parsed, "a/1", None)] == ["a"]
    assert matching_rules(parsed, "c", None) == []
