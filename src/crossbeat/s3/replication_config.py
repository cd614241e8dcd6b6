"""Bucket replication configuration: parse and validate as AWS does, render it back, and
match objects against its rules.

`parse_replication(body, versioning)` returns a JSON-able dict (stored as `Bucket.replication`)::

    {"role": "arn:aws:iam::123456789012:role/r",
     "rules": [{
        "id": "r1",                      # generated when the client sent none
        "schema": "V1" | "V2",           # V1: rule-level <Prefix>; V2: <Filter>
        "priority": 1 | None,            # required in V2
        "status": "Enabled" | "Disabled",
        "prefix": "logs/",               # V1: the rule prefix; V2: the filter prefix or ""
        "filter": None | {"form": "" | "Prefix" | "Tag" | "And",
                          "prefix": str | None, "tags": [[key, value], ...]},
        "deleteMarkerReplication": "Enabled" | "Disabled" | None,
        "destination": {"bucket": "arn:aws:s3:::dest", "bucketName": "dest",
                        "storageClass": "site-a,site-b" | None, "extra": {...}},
        "extra": {...}}]}                # ExistingObjectReplication, SourceSelectionCriteria…

`extra` holds elements we keep but do not interpret (ReplicationTime, Metrics, Account,
EncryptionConfiguration, …) as nested dicts, so GET renders them back as sent.

In crossbeat a rule's StorageClass names the destination *sites* (comma-separated), see
`destination_sites`, and its Bucket the bucket the replicas go to at each of them. So every
rule needs a StorageClass, and all rules name one destination bucket (a version's
replicationInfo records one `destination`): both are refused otherwise, rather than a rule
that would replicate nowhere, or to another bucket than it says.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from typing import Any
from xml.etree import ElementTree as ET

from crossbeat.s3.errors import S3Error
from crossbeat.s3.xmldoc import XmlWriter, child_text, parse_xml

MAX_RULES = 1000
MAX_RULE_ID = 255
_ROLE = re.compile(r"^arn:aws:iam::[^:]*:role/[^,\s]+$")
_BUCKET_ARN = re.compile(r"^arn:aws:s3:::([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])$")
_STATUS = ("Enabled", "Disabled")
# Rule children parsed into named fields; the rest go to rule["extra"].
_RULE_FIELDS = {
    "ID",
    "Priority",
    "Prefix",
    "Filter",
    "Status",
    "Destination",
    "DeleteMarkerReplication",
}
_DESTINATION_FIELDS = {"Bucket", "StorageClass"}

Config = dict[str, Any]
Rule = dict[str, Any]


def _malformed(message: str) -> S3Error:
    return S3Error("MalformedXML", message)


def _invalid_request(message: str) -> S3Error:
    return S3Error("InvalidRequest", message)


# --------------------------------------------------------------------------------------------
# opaque elements kept as JSON


def element_to_json(element: ET.Element) -> Any:
    """Leaf → its text; element with children → {tag: value}, repeated tags → lists."""
    children = list(element)
    if not children:
        return (element.text or "").strip()
    result: dict[str, Any] = {}
    for child in children:
        value = element_to_json(child)
        if child.tag in result:
            if not isinstance(result[child.tag], list):
                result[child.tag] = [result[child.tag]]
            result[child.tag].append(value)
        else:
            result[child.tag] = value
    return result


def write_json_elements(w: XmlWriter, doc: dict[str, Any]) -> None:
    """Inverse of `element_to_json` for the children of one element."""
    for tag, value in doc.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                w.open(tag)
                write_json_elements(w, item)
                w.close()
            else:
                w.leaf(tag, item)


# --------------------------------------------------------------------------------------------
# parsing


def _status(element: ET.Element | None, what: str) -> str:
    status = "" if element is None else (child_text(element, "Status") or "").strip()
    if status not in _STATUS:
        raise _malformed(f"{what} Status must be Enabled or Disabled.")
    return status


def _tag(element: ET.Element) -> list[str]:
    key = child_text(element, "Key")
    value = child_text(element, "Value")
    if not key or value is None:
        raise _malformed("A filter Tag needs a Key and a Value.")
    if len(key) > 128 or len(value) > 256:
        raise S3Error("InvalidTag", "The tag provided was not a valid tag.")
    return [key, value]


def _parse_filter(element: ET.Element) -> dict[str, Any]:
    forms = [child for child in element if child.tag in ("Prefix", "Tag", "And")]
    if len(forms) != len(list(element)):
        raise _malformed("A Filter holds one Prefix, Tag or And.")
    if len(forms) > 1:
        raise _malformed("A Filter holds only one of Prefix, Tag or And.")
    if not forms:
        return {"form": "", "prefix": None, "tags": []}
    form = forms[0]
    if form.tag == "Prefix":
        return {"form": "Prefix", "prefix": form.text or "", "tags": []}
    if form.tag == "Tag":
        return {"form": "Tag", "prefix": None, "tags": [_tag(form)]}
    prefixes = form.findall("Prefix")
    tags = [_tag(tag) for tag in form.findall("Tag")]
    if len(prefixes) > 1 or len(prefixes) + len(tags) != len(list(form)):
        raise _malformed("An And filter holds at most one Prefix and Tags.")
    if not tags and not prefixes:
        raise _malformed("An And filter needs at least one predicate.")
    keys = [key for key, _ in tags]
    if len(set(keys)) != len(keys):
        raise S3Error("InvalidArgument", "Duplicate Tag Keys are not allowed.")
    prefix = (prefixes[0].text or "") if prefixes else None
    return {"form": "And", "prefix": prefix, "tags": tags}


def _parse_destination(element: ET.Element | None) -> dict[str, Any]:
    if element is None:
        raise _malformed("A Rule needs a Destination.")
    arn = child_text(element, "Bucket")
    if not arn:
        raise _malformed("A Destination needs a Bucket.")
    match = _BUCKET_ARN.match(arn.strip())
    if not match:
        raise S3Error("InvalidArgument", "Invalid bucket ARN.", extra={"ArgumentName": "Bucket"})
    storage_class = child_text(element, "StorageClass")
    if storage_class is not None and not storage_class.strip():
        raise S3Error("InvalidArgument", "StorageClass must not be empty.")
    extra = {
        child.tag: element_to_json(child)
        for child in element
        if child.tag not in _DESTINATION_FIELDS
    }
    return {
        "bucket": arn.strip(),
        "bucketName": match.group(1),
        "storageClass": storage_class.strip() if storage_class is not None else None,
        "extra": extra,
    }


def _parse_rule(element: ET.Element) -> Rule:
    rule_id = child_text(element, "ID")
    if rule_id is not None and len(rule_id) > MAX_RULE_ID:
        raise S3Error("InvalidArgument", "The ID of a rule is at most 255 characters.")
    prefix_element = element.find("Prefix")
    filter_element = element.find("Filter")
    if prefix_element is not None and filter_element is not None:
        raise _malformed("A Rule has either a Prefix (V1) or a Filter (V2), not both.")
    if prefix_element is None and filter_element is None:
        raise _malformed("A Rule needs a Prefix or a Filter.")
    priority_text = child_text(element, "Priority")
    priority: int | None = None
    if priority_text is not None:
        try:
            priority = int(priority_text.strip())
        except ValueError:
            raise _malformed("Priority must be an integer.") from None
        if priority < 0:
            raise S3Error("InvalidArgument", "Priority must be a non-negative integer.")
    dmr_element = element.find("DeleteMarkerReplication")
    dmr = None if dmr_element is None else _status(dmr_element, "DeleteMarkerReplication")
    rule: Rule = {
        "id": rule_id.strip() if rule_id and rule_id.strip() else None,
        "schema": "V1" if prefix_element is not None else "V2",
        "priority": priority,
        "status": _status(element, "Rule"),
        "prefix": "",
        "filter": None,
        "deleteMarkerReplication": dmr,
        "destination": _parse_destination(element.find("Destination")),
        "extra": {
            child.tag: element_to_json(child) for child in element if child.tag not in _RULE_FIELDS
        },
    }
    if prefix_element is not None:
        rule["prefix"] = prefix_element.text or ""
        return rule
    assert filter_element is not None
    rule["filter"] = _parse_filter(filter_element)
    rule["prefix"] = rule["filter"]["prefix"] or ""
    if priority is None:
        raise _invalid_request(
            "Priority must be specified for this version of Cross Region Replication"
            " configuration schema. Please refer to S3 Developer Guide for more information."
        )
    if dmr is None:
        raise _invalid_request(
            "DeleteMarkerReplication must be specified for this version of Cross Region"
            " Replication configuration schema. Please refer to S3 Developer Guide for more"
            " information."
        )
    if rule["filter"]["tags"] and dmr != "Disabled":
        raise _invalid_request(
            "Delete marker replication is not supported if any Tag filter is specified."
            " Please refer to S3 Developer Guide for more information."
        )
    return rule


def _check_rules(rules: list[Rule]) -> None:
    ids = [rule["id"] for rule in rules if rule["id"] is not None]
    if len(set(ids)) != len(ids):
        raise S3Error("InvalidArgument", "Rule Id must be unique.")
    schemas = {rule["schema"] for rule in rules}
    if len(schemas) > 1:
        raise _invalid_request("Rules of the V1 (Prefix) and V2 (Filter) schemas cannot be mixed.")
    buckets = sorted({rule["destination"]["bucket"] for rule in rules})
    if schemas == {"V2"} and len(buckets) > 1:
        # AWS replicates to each; crossbeat records one destination per version
        # (replicationInfo.destination), so the rules to the others would be ignored.
        raise _invalid_request(
            "crossbeat replicates a bucket to one destination bucket: all rules must name the"
            f" same Destination Bucket, got {', '.join(buckets)}."
        )
    if schemas == {"V2"}:
        priorities = [rule["priority"] for rule in rules]
        if len(set(priorities)) != len(priorities):
            raise _invalid_request("Found two rules with the same priority.")
        return
    # V1: one destination bucket, and no object may match two rules.
    if len(buckets) > 1:
        raise _invalid_request("All V1 rules must have the same destination bucket.")
    prefixes = sorted(rule["prefix"] for rule in rules)
    for before, after in zip(prefixes, prefixes[1:], strict=False):
        if after.startswith(before):
            raise _invalid_request(
                f"Found overlapping prefixes '{before}' and '{after}' for the same destination"
                " bucket."
            )


def _check_sites(rules: list[Rule], sites: Collection[str] | None) -> None:
    """Every rule names its destination sites; with `sites` (the sites the replication
    pipelines are configured with), only those."""
    configured = f" (configured: {', '.join(sorted(sites)) or 'none'})" if sites is not None else ""
    for number, rule in enumerate(rules, start=1):
        which = f"Rule {rule['id']!r}" if rule["id"] is not None else f"Rule {number}"
        named = destination_sites(rule)
        if not named:
            # AWS takes a rule without StorageClass (the replica keeps the source's class);
            # here it would replicate nowhere, and its objects would get no status at all.
            raise _invalid_request(
                f"{which}: the Destination StorageClass names the crossbeat site(s) to"
                " replicate to, comma-separated (for example <StorageClass>b</StorageClass>),"
                f" and is required{configured}."
            )
        unknown = [site for site in named if sites is not None and site not in sites]
        if unknown:
            raise _invalid_request(
                f"{which}: the Destination StorageClass names the crossbeat site(s) to"
                f" replicate to, and {', '.join(map(repr, unknown))} is not a configured"
                f" site{configured}."
            )


def parse_replication(
    body: bytes | str, versioning: str, sites: Collection[str] | None = None
) -> Config:
    """Validate a PutBucketReplication body for a bucket whose versioning status is
    `versioning` and return the configuration dict (see the module docstring).

    `sites`: the destination sites the replication pipelines know (the gateway's
    `replication_sites`); None when the gateway is not told, and then a rule may name any
    site (the pipeline fails the versions of a site it does not know).

    Errors (as AWS): versioning not Enabled → InvalidRequest; ill-formed or missing required
    elements → MalformedXML; bad Role or destination ARN, duplicate rule IDs → InvalidArgument;
    V2 rule without Priority or DeleteMarkerReplication, tag filter with delete marker
    replication Enabled, duplicate priorities, mixed V1/V2 rules, overlapping V1 prefixes,
    more than 1000 rules → InvalidRequest. And crossbeat's own (InvalidRequest): a rule
    without StorageClass, or naming a site not in `sites`; rules naming several
    destination buckets."""
    root = parse_xml(body)
    if root.tag != "ReplicationConfiguration":
        raise _malformed("Expected a ReplicationConfiguration document.")
    if versioning != "Enabled":
        raise _invalid_request(
            "Versioning must be 'Enabled' on the bucket to apply a replication configuration"
        )
    role = child_text(root, "Role")
    if not role:
        raise _malformed("A ReplicationConfiguration needs a Role.")
    # Backbeat-style configurations may name a source and a destination role.
    roles = [part.strip() for part in role.split(",")]
    if len(roles) > 2 or not all(_ROLE.match(part) for part in roles):
        raise S3Error("InvalidArgument", "Invalid Role specified in replication configuration")
    elements = root.findall("Rule")
    if not elements:
        raise _malformed("A ReplicationConfiguration needs at least one Rule.")
    if len(elements) > MAX_RULES:
        raise _invalid_request(f"A replication configuration may hold at most {MAX_RULES} rules.")
    rules = [_parse_rule(element) for element in elements]
    _check_rules(rules)
    _check_sites(rules, sites)
    taken = {rule["id"] for rule in rules}
    for rule in rules:
        while rule["id"] is None:
            candidate = uuid.uuid4().hex
            if candidate not in taken:
                rule["id"] = candidate
                taken.add(candidate)
    return {"role": role.strip(), "rules": rules}


# --------------------------------------------------------------------------------------------
# rendering


def replication_xml(config: Config) -> bytes:
    """GetBucketReplication body for a configuration returned by `parse_replication`."""
    w = XmlWriter("ReplicationConfiguration")
    w.leaf("Role", config["role"])
    for rule in config["rules"]:
        w.open("Rule").leaf("ID", rule["id"]).leaf("Priority", rule.get("priority"))
        flt = rule.get("filter")
        if flt is None:
            w.leaf("Prefix", rule.get("prefix", ""))
        else:
            w.open("Filter")
            if flt["form"] == "Prefix":
                w.leaf("Prefix", flt["prefix"] or "")
            elif flt["form"] == "Tag":
                key, value = flt["tags"][0]
                w.open("Tag").leaf("Key", key).leaf("Value", value).close()
            elif flt["form"] == "And":
                w.open("And").leaf("Prefix", flt["prefix"])
                for key, value in flt["tags"]:
                    w.open("Tag").leaf("Key", key).leaf("Value", value).close()
                w.close()
            w.close()
        w.leaf("Status", rule["status"])
        write_json_elements(w, rule.get("extra") or {})
        destination = rule["destination"]
        w.open("Destination").leaf("Bucket", destination["bucket"])
        w.leaf("StorageClass", destination.get("storageClass"))
        write_json_elements(w, destination.get("extra") or {})
        w.close()
        if rule.get("deleteMarkerReplication") is not None:
            w.open("DeleteMarkerReplication").leaf("Status", rule["deleteMarkerReplication"])
            w.close()
        w.close()
    return bytes(w)


# --------------------------------------------------------------------------------------------
# matching


def rule_matches(rule: Rule, key: str, tags: dict[str, str] | None) -> bool:
    """Whether an enabled `rule` applies to an object with `key` and `tags`."""
    if rule.get("status") != "Enabled":
        return False
    if not key.startswith(rule.get("prefix") or ""):
        return False
    flt = rule.get("filter") or {}
    object_tags = tags or {}
    return all(object_tags.get(k) == v for k, v in flt.get("tags") or [])


def matching_rules(config: Config | None, key: str, tags: dict[str, str] | None) -> list[Rule]:
    """The enabled rules whose filter matches, highest priority first (AWS: the higher the
    number, the higher the priority); V1 rules keep their document order."""
    if not config:
        return []
    matched = [rule for rule in config.get("rules", []) if rule_matches(rule, key, tags)]
    return sorted(matched, key=lambda rule: -(rule.get("priority") or 0))


def destination_sites(rule: Rule) -> list[str]:
    """The sites a rule replicates to: its StorageClass split on commas, stripped; [] if
    none."""
    storage_class = (rule.get("destination") or {}).get("storageClass") or ""
    return [site.strip() for site in storage_class.split(",") if site.strip()]
