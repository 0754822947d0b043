"""DescribeCluster (key 60), versions 0-1: this one broker, which is also the controller.

Anyone may ask (as in Kafka); authorized operations, when asked: those the client may
perform on the cluster, none without DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from headrace.broker.context import RequestContext
from headrace.broker.registry import handles
from headrace.protocol.acl_operations import ResourceType


@handles(DescribeClusterRequest, DescribeClusterResponse, max_version=1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    state = ctx.state
    node = state.config.node_id
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1,
        cluster_id=state.logs.cluster_id, controller_id=node,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(
            broker_id=node, host=ctx.listener.advertised_host, port=ctx.listener.port, rack=None)],
        authorized_operations=ctx.operations(request.include_cluster_authorized_operations,
                                             ResourceType.CLUSTER),
    )
