"""Bucket notification configuration: parse and validate as AWS does, render it back, and
find the configurations an event matches.

`parse_notification(body)` returns None for an empty document (which clears the
configuration) or a JSON-able dict (stored as `Bucket.notification`)::

    {"configurations": [{"type": "Topic" | "Queue" | "CloudFunction",
                         "id": "c1",                 # generated when absent
                         "arn": "arn:aws:sqs:us-east-1:123456789012:q",
                         "events": ["s3:ObjectCreated:*", ...],
                         "filter": {"prefix": "logs/" | None, "suffix": ".gz" | None}}],
     "eventBridge": False}
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from xml.etree import ElementTree as ET

from crossbeat.s3.errors import S3Error
from crossbeat.s3.xmldoc import XmlWriter, child_text, parse_xml

# configuration element -> (type, element naming its target ARN)
_KINDS = {
    "TopicConfiguration": ("Topic", "Topic"),
    "QueueConfiguration": ("Queue", "Queue"),
    "CloudFunctionConfiguration": ("CloudFunction", "CloudFunction"),
}
_ELEMENT_BY_TYPE = {kind: (element, target) for element, (kind, target) in _KINDS.items()}
_ARN = re.compile(r"^arn:[^:\s]+:[^:\s]+:[^:\s]*:[^:\s]*:\S+$")
MAX_ID = 255

# Every event type S3 can publish (without the wildcards, which `EVENT_NAMES` adds).
_EVENTS = [
    "s3:TestEvent",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
    "s3:ObjectRestore:Post",
    "s3:ObjectRestore:Completed",
    "s3:ObjectRestore:Delete",
    "s3:ReducedRedundancyLostObject",
    "s3:Replication:OperationFailedReplication",
    "s3:Replication:OperationMissedThreshold",
    "s3:Replication:OperationReplicatedAfterThreshold",
    "s3:Replication:OperationNotTracked",
    "s3:LifecycleExpiration:Delete",
    "s3:LifecycleExpiration:DeleteMarkerCreated",
    "s3:LifecycleTransition",
    "s3:IntelligentTiering",
    "s3:ObjectTagging:Put",
    "s3:ObjectTagging:Delete",
    "s3:ObjectAcl:Put",
]
EVENT_NAMES = frozenset(
    _EVENTS
    + [
        "s3:ObjectCreated:*",
        "s3:ObjectRemoved:*",
        "s3:ObjectRestore:*",
        "s3:Replication:*",
        "s3:LifecycleExpiration:*",
        "s3:ObjectTagging:*",
    ]
)

Config = dict[str, Any]


def _invalid(message: str, name: str = "", value: str = "") -> S3Error:
    extra = {"ArgumentName": name, "ArgumentValue": value} if name else {}
    return S3Error("InvalidArgument", message, extra=extra)


def _parse_filter(element: ET.Element | None) -> dict[str, str | None]:
    result: dict[str, str | None] = {"prefix": None, "suffix": None}
    if element is None:
        return result
    s3key = element.find("S3Key")
    if s3key is None:
        if len(element):
            raise S3Error("MalformedXML", "A notification Filter holds an S3Key.")
        return result
    for rule in s3key.findall("FilterRule"):
        name = (child_text(rule, "Name") or "").strip().lower()
        value = child_text(rule, "Value")
        if name not in result:
            raise _invalid("filter rule name must be either prefix or suffix", "FilterRule", name)
        if value is None:
            raise S3Error("MalformedXML", "A FilterRule needs a Value.")
        if result[name] is not None:
            raise _invalid(f"Cannot specify more than one {name} rule in a filter.", "FilterRule")
        result[name] = value
    return result


def _parse_configuration(element: ET.Element) -> dict[str, Any]:
    kind, target = _KINDS[element.tag]
    config_id = child_text(element, "Id")
    if config_id is not None and len(config_id) > MAX_ID:
        raise _invalid("The Id of a configuration is at most 255 characters.", "Id")
    arn = (child_text(element, target) or "").strip()
    if not arn:
        raise S3Error("MalformedXML", f"A {element.tag} needs a {target}.")
    if not _ARN.match(arn):
        raise _invalid("The ARN is not well formed", target, arn)
    events = [(event.text or "").strip() for event in element.findall("Event")]
    if not events:
        raise S3Error("MalformedXML", f"A {element.tag} needs at least one Event.")
    for event in events:
        if event not in EVENT_NAMES:
            raise _invalid("The event is not supported for notifications", "Event", event)
    return {
        "type": kind,
        "id": config_id.strip() if config_id and config_id.strip() else None,
        "arn": arn,
        "events": list(dict.fromkeys(events)),
        "filter": _parse_filter(element.find("Filter")),
    }


def _events_overlap(a: list[str], b: list[str]) -> bool:
    return any(event_matches(x, y) or event_matches(y, x) for x in a for y in b)


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """AWS refuses two configurations that could both fire for one event on one key."""
    if not _events_overlap(a["events"], b["events"]):
        return False
    pa, pb = a["filter"]["prefix"] or "", b["filter"]["prefix"] or ""
    sa, sb = a["filter"]["suffix"] or "", b["filter"]["suffix"] or ""
    prefixes_overlap = pa.startswith(pb) or pb.startswith(pa)
    suffixes_overlap = sa.endswith(sb) or sb.endswith(sa)
    return prefixes_overlap and suffixes_overlap


def parse_notification(body: bytes | str) -> Config | None:
    """Validate a PutBucketNotificationConfiguration body. None for an empty
    `<NotificationConfiguration/>` (clear the configuration).

    Errors: ill-formed, unknown elements, missing target or events → MalformedXML; a bad
    ARN, unknown event name, filter rule name other than prefix/suffix, more than one
    prefix or suffix rule, duplicate Ids, overlapping configurations → InvalidArgument."""
    root = parse_xml(body)
    if root.tag != "NotificationConfiguration":
        raise S3Error("MalformedXML", "Expected a NotificationConfiguration document.")
    configurations: list[dict[str, Any]] = []
    event_bridge = False
    for child in root:
        if child.tag == "EventBridgeConfiguration":
            event_bridge = True
        elif child.tag in _KINDS:
            configurations.append(_parse_configuration(child))
        else:
            raise S3Error("MalformedXML", f"Unexpected element {child.tag}.")
    ids = [c["id"] for c in configurations if c["id"] is not None]
    if len(set(ids)) != len(ids):
        raise _invalid("Configuration Ids must be unique.", "Id")
    for i, first in enumerate(configurations):
        for second in configurations[i + 1 :]:
            if _overlap(first, second):
                raise _invalid(
                    "Configurations overlap. Configurations on the same bucket cannot share a"
                    " common event type.",
                    "Event",
                )
    if not configurations and not event_bridge:
        return None
    taken = set(ids)
    for config in configurations:
        while config["id"] is None:
            candidate = str(uuid.uuid4())
            if candidate not in taken:
                config["id"] = candidate
                taken.add(candidate)
    return {"configurations": configurations, "eventBridge": event_bridge}


def notification_xml(config: Config | None) -> bytes:
    """GetBucketNotificationConfiguration body (an empty document when `config` is None)."""
    w = XmlWriter("NotificationConfiguration")
    if not config:
        return bytes(w)
    for item in config.get("configurations", []):
        element, target = _ELEMENT_BY_TYPE[item["type"]]
        w.open(element).leaf("Id", item["id"]).leaf(target, item["arn"])
        for event in item["events"]:
            w.leaf("Event", event)
        flt = item.get("filter") or {}
        rules = [(name, flt.get(name)) for name in ("prefix", "suffix")]
        if any(value is not None for _, value in rules):
            w.open("Filter").open("S3Key")
            for name, value in rules:
                if value is not None:
                    w.open("FilterRule").leaf("Name", name).leaf("Value", value).close()
            w.close().close()
        w.close()
    if config.get("eventBridge"):
        w.open("EventBridgeConfiguration").close()
    return bytes(w)


def event_matches(configured: str, event_name: str) -> bool:
    """Whether a configured event (maybe a `…:*` wildcard) covers `event_name`. Both may be
    written with or without the `s3:` prefix (event records use `ObjectCreated:Put`)."""
    configured = configured if configured.startswith("s3:") else "s3:" + configured
    event_name = event_name if event_name.startswith("s3:") else "s3:" + event_name
    if configured.endswith(":*"):
        return event_name.startswith(configured[:-1]) or event_name == configured
    return configured == event_name


def matching_configurations(
    config: Config | None, event_name: str, key: str
) -> list[dict[str, Any]]:
    """The configurations that fire for `event_name` on `key` (prefix and suffix filters)."""
    if not config:
        return []
    matched = []
    for item in config.get("configurations", []):
        flt = item.get("filter") or {}
        if not key.startswith(flt.get("prefix") or ""):
            continue
        if not key.endswith(flt.get("suffix") or ""):
            continue
        if any(event_matches(event, event_name) for event in item["events"]):
            matched.append(item)
    return matched
