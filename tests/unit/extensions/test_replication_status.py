from __future__ import annotations

import copy
from typing import Any

import pytest

from crossbeat.extensions.replication.messages import ReplicationOutcome, content_fingerprint
from crossbeat.extensions.replication.status import apply_outcome, global_status

MD: dict[str, Any] = {
    "bucket": "bk", "key": "k", "versionId": "V1", "etag": '"abc"', "size": 3,
    "userMetadata": {"a": "1"}, "tags": {"t": "x"}, "revision": 4,
    "replicationInfo": {
        "status": "PENDING",
        "backends": [
            {"site": "b", "status": "PENDING", "dataStoreVersionId": ""},
            {"site": "c", "status": "PENDING", "dataStoreVersionId": ""},
        ],
    },
}


def outcome(site: str, status: str, md: dict[str, Any] = MD) -> ReplicationOutcome:
    return ReplicationOutcome("bk", "k", "V1", site, status, "V1", content_fingerprint(md), 1, None, 0.0)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["COMPLETED", "COMPLETED"], "COMPLETED"),
        (["COMPLETED", "PENDING"], "PROCESSING"),
        (["PENDING", "PENDING"], "PENDING"),
        (["COMPLETED", "FAILED"], "FAILED"),
        (["FAILED", "PENDING"], "FAILED"),
        ([], "COMPLETED"),
    ],
)
def test_global_status(statuses: list[str], expected: str) -> None:
    assert global_status(statuses) == expected


def test_completing_sites_one_by_one() -> None:
    one = apply_outcome(MD, outcome("b", "COMPLETED"))
    assert one is not None
    assert one["replicationInfo"]["status"] == "PROCESSING"
    assert one["replicationInfo"]["backends"][0] == {"site": "b", "status": "COMPLETED",
                                                     "dataStoreVersionId": "V1"}
    two = apply_outcome(one, outcome("c", "COMPLETED"))
    assert two is not None and two["replicationInfo"]["status"] == "COMPLETED"
    assert MD["replicationInfo"]["status"] == "PENDING"  # input untouched


def test_completed_is_never_overwritten_by_an_older_failure() -> None:
    done = apply_outcome(MD, outcome("b", "COMPLETED"))
    assert done is not None
    assert apply_outcome(done, outcome("b", "FAILED")) is None


def test_redelivered_outcome_changes_nothing() -> None:
    done = apply_outcome(MD, outcome("b", "COMPLETED"))
    assert done is not None
    assert apply_outcome(done, outcome("b", "COMPLETED")) is None


def test_failure_makes_the_version_failed_and_a_later_success_completes_it() -> None:
    failed = apply_outcome(MD, outcome("b", "FAILED"))
    assert failed is not None and failed["replicationInfo"]["status"] == "FAILED"
    ok = apply_outcome(failed, outcome("b", "COMPLETED"))
    assert ok is not None and ok["replicationInfo"]["backends"][0]["status"] == "COMPLETED"


def test_completion_of_content_that_since_changed_is_ignored() -> None:
    changed = copy.deepcopy(MD)
    changed["tags"] = {"t": "y"}
    assert apply_outcome(changed, outcome("b", "COMPLETED", md=MD)) is None


def test_unknown_site_is_ignored() -> None:
    assert apply_outcome(MD, outcome("z", "COMPLETED")) is None


def test_messages_round_trip_every_field() -> None:
    """The hand-written documents carry every field (a new field must not be dropped)."""
    import dataclasses

    from crossbeat.extensions.replication.messages import ReplicationEntry, ReplicationOutcome

    entry = ReplicationEntry(7, "b", "k", "v1", False, ("x", "y"), "2026-01-01T00:00:00Z", 123)
    doc = entry.to_json()
    assert {f.name for f in dataclasses.fields(entry)} <= set(doc)
    assert ReplicationEntry.from_json(doc) == entry
    outcome = ReplicationOutcome("b", "k", "v1", "x", "FAILED", "", "fp", 3, "boom", 1.5,
                                 source={"revision": 4, "tags": {"a": "1"}})
    doc = outcome.to_json()
    assert {f.name for f in dataclasses.fields(outcome)} - {"applied"} <= set(doc)
    assert ReplicationOutcome.from_json(doc) == outcome
    assert "source" not in dataclasses.replace(outcome, source=None).to_json()


def test_an_applied_outcome_says_so_and_leaves_the_source_metadata_out() -> None:
    import dataclasses

    from crossbeat.extensions.replication.messages import ReplicationOutcome

    outcome = ReplicationOutcome("b", "k", "v1", "x", "COMPLETED", "v1", "fp", 1, None, 1.5,
                                 source={"revision": 4})
    assert "applied" not in outcome.to_json()
    doc = dataclasses.replace(outcome, applied=True).to_json()
    assert doc["applied"] is True and "source" not in doc
    assert ReplicationOutcome.from_json(doc) == dataclasses.replace(outcome, applied=True, source=None)
    # only a JSON true counts: a malformed flag leaves the outcome to the status pipeline
    assert not ReplicationOutcome.from_json({**doc, "applied": "yes"}).applied
