"""The replicationInfo a new version gets when its bucket has a replication configuration."""

from __future__ import annotations

from typing import Any

from crossbeat.metadata import Bucket
from crossbeat.s3 import replication_config

PENDING = "PENDING"
REPLICA = "REPLICA"


def replication_info(
    bucket: Bucket, key: str, tags: dict[str, str], *, delete_marker: bool = False
) -> dict[str, Any] | None:
    """PENDING with one backend per destination site (rule StorageClass), or None.

    Destination sites are the union over every enabled rule that matches the key and tags;
    delete markers replicate only through rules that enable DeleteMarkerReplication.
    `destination` is the rules' Destination Bucket ARN (Arsenal's field): the bucket the
    replicas go to at every one of those sites (the source bucket's name where a version
    has no `destination`, as versions written before it was recorded).
    """
    config = bucket.replication
    if not config:
        return None
    sites: list[str] = []
    destination = ""
    for rule in replication_config.matching_rules(config, key, tags):
        if delete_marker and not _replicates_delete_markers(rule):
            continue
        arn = str((rule.get("destination") or {}).get("bucket") or "")
        # parse_replication admits one destination bucket per configuration; should a
        # stored one name several, the highest-priority rule's wins, and rules to another
        # bucket are left out rather than sending their sites' replicas to the wrong one.
        destination = destination or arn
        if arn != destination:
            continue
        for site in replication_config.destination_sites(rule):
            if site not in sites:
                sites.append(site)
    if not sites:
        return None
    return {
        "status": PENDING,
        "role": config.get("role", ""),
        "storageClass": ",".join(sites),
        "content": ["METADATA"] if delete_marker else ["DATA", "METADATA"],
        "destination": destination,
        "backends": [{"site": s, "status": PENDING, "dataStoreVersionId": ""} for s in sites],
        "preferredRead": "",
    }


def global_status(backends: list[dict[str, Any]]) -> str:
    """ARCHITECTURE.md: FAILED if any failed, else PROCESSING/PENDING while any pending, else COMPLETED."""
    statuses = [b.get("status") for b in backends]
    if "FAILED" in statuses:
        return "FAILED"
    if "PROCESSING" in statuses:
        return "PROCESSING"
    if PENDING in statuses:
        return PENDING
    return "COMPLETED"


def _replicates_delete_markers(rule: dict[str, Any]) -> bool:
    """V1 rules replicate delete markers; V2 rules only when DeleteMarkerReplication is Enabled."""
    if rule.get("schema") == "V1":
        return True
    return rule.get("deleteMarkerReplication") == "Enabled"
