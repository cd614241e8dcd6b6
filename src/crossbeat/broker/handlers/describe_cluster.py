"""DescribeCluster (60): the cluster id, this broker as the only broker (never fenced) and
as the controller, as Metadata reports them. Cluster authorized operations are reported
as not provided (there are no ACLs to compute them from). Only broker endpoints are
served: a request for another endpoint type (v1+) is MISMATCHED_ENDPOINT_TYPE, as Kafka's
broker answers it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context

_Broker = DescribeClusterResponse.DescribeClusterBroker
BROKER_ENDPOINT = 1
_ENDPOINT_NAMES = {1: "BROKER", 2: "CONTROLLER"}


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    endpoint = req.endpoint_type if ctx.version >= 1 else BROKER_ENDPOINT
    code, message = ErrorCode.NONE, None
    brokers = [_Broker(broker_id=broker.node_id, host=broker.host, port=broker.port, rack=None,
                       is_fenced=False)]
    if endpoint != BROKER_ENDPOINT:
        code, brokers = ErrorCode.MISMATCHED_ENDPOINT_TYPE, []
        message = ("The request was sent to an endpoint of type BROKER, but we wanted an "
                   f"endpoint of type {_ENDPOINT_NAMES.get(endpoint, 'UNKNOWN')}")
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=int(code), error_message=message,
        endpoint_type=BROKER_ENDPOINT, cluster_id=broker.settings.cluster_id,
        controller_id=broker.node_id, brokers=brokers,
        authorized_operations=None)  # None encodes as -2**31: not provided
