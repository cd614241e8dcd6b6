"""The KIP-848 requests over a socket against a live broker: a heartbeat's assignment names
the topic by its Metadata id, and OffsetCommit / OffsetFetch / ListGroups / DescribeGroups /
JoinGroup treat the consumer group as Kafka 4 does."""

from __future__ import annotations

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call


def test_consumer_group_over_the_wire(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        meta = APIS[3].request
        topic = call(sock, meta(version=13, topics=[meta.MetadataRequestTopic(name="orders")],
                                allow_auto_topic_creation=True)).topics[0]
        hb = APIS[68].request
        joined = call(sock, hb(version=1, group_id="g", member_id="m1", member_epoch=0,
                               rebalance_timeout_ms=60000, subscribed_topic_names=["orders"],
                               topic_partitions=[]))
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        assert [(tp.topic_id, tp.partitions) for tp in joined.assignment.topic_partitions] == [
            (topic.topic_id, [0])]

        commit = APIS[8].request
        part = commit.OffsetCommitRequestTopic.OffsetCommitRequestPartition

        def commit_code(version: int, epoch: int) -> int:
            topics = [commit.OffsetCommitRequestTopic(name="orders", partitions=[
                part(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                     committed_metadata="")])]
            resp = call(sock, commit(version=version, group_id="g", member_id="m1",
                                     generation_id_or_member_epoch=epoch,
                                     group_instance_id=None, topics=topics))
            code: int = resp.topics[0].partitions[0].error_code
            return code

        assert commit_code(9, 0) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit_code(8, 1) == ErrorCode.UNSUPPORTED_VERSION
        assert commit_code(9, 1) == ErrorCode.NONE

        fetch = APIS[9].request
        group = fetch.OffsetFetchRequestGroup
        stale = call(sock, fetch(version=9, require_stable=True, groups=[
            group(group_id="g", member_id="m1", member_epoch=0, topics=None)])).groups[0]
        assert (stale.error_code, stale.topics) == (ErrorCode.STALE_MEMBER_EPOCH, [])
        anyone = call(sock, fetch(version=9, require_stable=True, groups=[
            group(group_id="g", member_id=None, member_epoch=-1, topics=None)])).groups[0]
        assert [(t.name, p.committed_offset) for t in anyone.topics for p in t.partitions] == [
            ("orders", 5)]

        listing = APIS[16].request
        consumer = call(sock, listing(version=5, states_filter=[], types_filter=["Consumer"]))
        assert [(g.group_id, g.group_type, g.group_state) for g in consumer.groups] == [
            ("g", "consumer", "Stable")]
        assert call(sock, listing(version=5, states_filter=[], types_filter=["classic"])).groups == []

        described = call(sock, APIS[15].request(version=4, groups=["g"],
                                                include_authorized_operations=False))
        assert described.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND

        join = APIS[11].request
        refused = call(sock, join(version=5, group_id="g", session_timeout_ms=10000,
                                  rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                                  protocol_type="consumer",
                                  protocols=[join.JoinGroupRequestProtocol(name="range",
                                                                           metadata=b"")]))
        assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

        left = call(sock, hb(version=1, group_id="g", member_id="m1", member_epoch=-1))
        assert (left.error_code, left.member_epoch) == (0, -1)
        empty = call(sock, listing(version=5, states_filter=["empty"], types_filter=[]))
        assert [(g.group_id, g.group_type) for g in empty.groups] == [("g", "consumer")]
