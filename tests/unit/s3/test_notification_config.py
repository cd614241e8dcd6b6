"""Notification configuration: validation as AWS, round trips, clearing, event matching."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest

from crossbeat.s3.errors import S3Error
from crossbeat.s3.notification_config import (
    event_matches,
    matching_configurations,
    notification_xml,
    parse_notification,
)
from crossbeat.s3.xmldoc import NS

N = "{" + NS + "}"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:q"
TOPIC = "arn:aws:sns:us-east-1:123456789012:t"
LAMBDA = "arn:aws:lambda:us-east-1:123456789012:function:f"


def item(
    kind: str = "Queue",
    arn: str = QUEUE,
    events: tuple[str, ...] = ("s3:ObjectCreated:*",),
    config_id: str | None = "c",
    rules: tuple[tuple[str, str], ...] = (),
) -> str:
    parts = [f"<Id>{config_id}</Id>"] if config_id is not None else []
    parts.append(f"<{kind}>{arn}</{kind}>")
    parts += [f"<Event>{e}</Event>" for e in events]
    if rules:
        filter_rules = "".join(
            f"<FilterRule><Name>{n}</Name><Value>{v}</Value></FilterRule>" for n, v in rules
        )
        parts.append(f"<Filter><S3Key>{filter_rules}</S3Key></Filter>")
    return f"<{kind}Configuration>{''.join(parts)}</{kind}Configuration>"


def doc(*items: str) -> bytes:
    return f'<NotificationConfiguration xmlns="{NS}">{"".join(items)}</NotificationConfiguration>'.encode()


def code_of(body: bytes) -> str:
    with pytest.raises(S3Error) as info:
        parse_notification(body)
    return info.value.code


def test_empty_document_clears() -> None:
    assert parse_notification(doc()) is None
    assert parse_notification(b"<NotificationConfiguration/>") is None
    root = ET.fromstring(notification_xml(None))
    assert root.tag == N + "NotificationConfiguration" and len(root) == 0


def test_all_kinds_round_trip() -> None:
    body = doc(
        item(
            "Queue",
            QUEUE,
            ("s3:ObjectCreated:Put", "s3:ObjectCreated:Copy"),
            "q",
            (("prefix", "in/"), ("suffix", ".jpg")),
        ),
        item("Topic", TOPIC, ("s3:ObjectRemoved:*",), "t", (("Prefix", "logs/"),)),
        item("CloudFunction", LAMBDA, ("s3:ObjectTagging:*", "s3:ObjectAcl:Put"), None),
        "<EventBridgeConfiguration/>",
    )
    parsed = parse_notification(body)
    assert parsed is not None
    kinds = [(c["type"], c["arn"], c["events"]) for c in parsed["configurations"]]
    assert kinds == [
        ("Queue", QUEUE, ["s3:ObjectCreated:Put", "s3:ObjectCreated:Copy"]),
        ("Topic", TOPIC, ["s3:ObjectRemoved:*"]),
        ("CloudFunction", LAMBDA, ["s3:ObjectTagging:*", "s3:ObjectAcl:Put"]),
    ]
    assert parsed["configurations"][0]["filter"] == {"prefix": "in/", "suffix": ".jpg"}
    assert parsed["configurations"][1]["filter"] == {"prefix": "logs/", "suffix": None}
    assert parsed["configurations"][2]["id"]  # generated
    assert parsed["eventBridge"] is True
    rendered = notification_xml(parsed)
    assert parse_notification(rendered) == parsed
    root = ET.fromstring(rendered)
    assert root.findtext(f"{N}QueueConfiguration/{N}Queue") == QUEUE
    assert root.find(N + "EventBridgeConfiguration") is not None


def test_unnamespaced_document() -> None:
    body = f"<NotificationConfiguration>{item()}</NotificationConfiguration>".encode()
    parsed = parse_notification(body)
    assert parsed is not None and parsed["configurations"][0]["id"] == "c"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (doc(item(events=("s3:ObjectCreated:Bogus",))), "InvalidArgument"),
        (doc(item(events=("ObjectCreated:Put",))), "InvalidArgument"),
        (doc(item(events=())), "MalformedXML"),
        (doc(item(arn="not-an-arn")), "InvalidArgument"),
        (doc(item(arn="arn:aws:sqs")), "InvalidArgument"),
        (doc(item(arn="")), "MalformedXML"),
        (doc(item(rules=(("prefix", "a"), ("prefix", "b")))), "InvalidArgument"),
        (doc(item(rules=(("suffix", "a"), ("Suffix", "b")))), "InvalidArgument"),
        (doc(item(rules=(("infix", "a"),))), "InvalidArgument"),
        (doc(item(config_id="x" * 256)), "InvalidArgument"),
        (
            doc(
                item(config_id="same", events=("s3:ObjectCreated:Put",)),
                item(config_id="same", events=("s3:ObjectRemoved:*",)),
            ),
            "InvalidArgument",
        ),
        (doc("<Bogus/>"), "MalformedXML"),
        (
            doc(
                "<QueueConfiguration><Queue>"
                + QUEUE
                + "</Queue><Event>s3:ObjectCreated:*</Event><Filter><Other/></Filter></QueueConfiguration>"
            ),
            "MalformedXML",
        ),
        (
            doc(
                "<QueueConfiguration><Queue>"
                + QUEUE
                + "</Queue><Event>s3:ObjectCreated:*</Event><Filter><S3Key><FilterRule><Name>prefix</Name></FilterRule></S3Key></Filter></QueueConfiguration>"
            ),
            "MalformedXML",
        ),
        (b"<Tagging/>", "MalformedXML"),
        (b'<!DOCTYPE n [<!ENTITY x "y">]><NotificationConfiguration/>', "MalformedXML"),
    ],
)
def test_validation(body: bytes, code: str) -> None:
    assert code_of(body) == code


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ((("s3:ObjectCreated:*",), ()), (("s3:ObjectCreated:Put",), ()), True),
        ((("s3:ObjectCreated:Put",), ()), (("s3:ObjectRemoved:*",), ()), False),
        (
            (("s3:ObjectCreated:*",), (("prefix", "a/"),)),
            (("s3:ObjectCreated:*",), (("prefix", "b/"),)),
            False,
        ),
        (
            (("s3:ObjectCreated:*",), (("prefix", "a/"),)),
            (("s3:ObjectCreated:*",), (("prefix", "a/b"),)),
            True,
        ),
        (
            (("s3:ObjectCreated:*",), (("suffix", ".jpg"),)),
            (("s3:ObjectCreated:*",), (("suffix", ".png"),)),
            False,
        ),
        (
            (("s3:ObjectCreated:*",), (("suffix", ".jpg"),)),
            (("s3:ObjectCreated:*",), (("suffix", "x.jpg"),)),
            True,
        ),
    ],
)
def test_overlapping_configurations_are_refused(
    first: tuple[tuple[str, ...], tuple[tuple[str, str], ...]],
    second: tuple[tuple[str, ...], tuple[tuple[str, str], ...]],
    overlap: bool,
) -> None:
    body = doc(
        item(events=first[0], rules=first[1], config_id="one"),
        item(events=second[0], rules=second[1], config_id="two"),
    )
    if overlap:
        assert code_of(body) == "InvalidArgument"
    else:
        parsed = parse_notification(body)
        assert parsed is not None and len(parsed["configurations"]) == 2


def test_event_matches() -> None:
    assert event_matches("s3:ObjectCreated:*", "s3:ObjectCreated:Put")
    assert event_matches("s3:ObjectCreated:*", "ObjectCreated:CompleteMultipartUpload")
    assert event_matches(
        "s3:ObjectRemoved:DeleteMarkerCreated", "ObjectRemoved:DeleteMarkerCreated"
    )
    assert not event_matches("s3:ObjectCreated:Put", "s3:ObjectCreated:Copy")
    assert not event_matches("s3:ObjectCreated:*", "s3:ObjectRemoved:Delete")
    assert not event_matches("s3:ObjectTagging:*", "s3:ObjectCreated:Put")


def test_matching_configurations() -> None:
    parsed = parse_notification(
        doc(
            item(
                "Queue",
                QUEUE,
                ("s3:ObjectCreated:*",),
                "images",
                (("prefix", "img/"), ("suffix", ".jpg")),
            ),
            item("Topic", TOPIC, ("s3:ObjectRemoved:*",), "removals"),
            item(
                "CloudFunction", LAMBDA, ("s3:ObjectCreated:Put",), "logs", (("prefix", "logs/"),)
            ),
        )
    )

    def ids(event: str, key: str) -> list[str]:
        return [c["id"] for c in matching_configurations(parsed, event, key)]

    assert ids("s3:ObjectCreated:Put", "img/a.jpg") == ["images"]
    assert ids("ObjectCreated:Copy", "img/a.jpg") == ["images"]
    assert ids("s3:ObjectCreated:Put", "img/a.png") == []
    assert ids("s3:ObjectCreated:Put", "logs/x") == ["logs"]
    assert ids("s3:ObjectCreated:Copy", "logs/x") == []
    assert ids("s3:ObjectRemoved:DeleteMarkerCreated", "anything") == ["removals"]
    assert matching_configurations(None, "s3:ObjectCreated:Put", "k") == []
