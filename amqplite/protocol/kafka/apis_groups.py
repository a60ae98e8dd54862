"""Schemas of the group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup,
OffsetCommit/OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.

Field facts from Kafka's message definitions, cut to the versions amqplite serves
(see ``messages.SUPPORTED``); the text format is described in ``schema``.
"""

from __future__ import annotations

from amqplite.protocol.kafka.schema import Message

FIND_COORDINATOR_REQUEST = Message("FindCoordinatorRequest", """
key string 0-3
key_type int8 1+ default=0
coordinator_keys []string 4+
""", flexible=3)

FIND_COORDINATOR_RESPONSE = Message("FindCoordinatorResponse", """
throttle_time_ms int32 1+
error_code int16 0-3
error_message string 1-3 null=1-3
node_id int32 0-3
host string 0-3
port int32 0-3
coordinators [] 4+
    key string 4+
    node_id int32 4+
    host string 4+
    port int32 4+
    error_code int16 4+
    error_message string 4+ null=4+
""", flexible=3)

JOIN_GROUP_REQUEST = Message("JoinGroupRequest", """
group_id string
session_timeout_ms int32
rebalance_timeout_ms int32 1+ default=-1
member_id string
group_instance_id string 5+ null=5+ default=null
protocol_type string
protocols []
    name string
    metadata bytes
""", flexible=6)

JOIN_GROUP_RESPONSE = Message("JoinGroupResponse", """
throttle_time_ms int32 2+
error_code int16
generation_id int32 default=-1
protocol_type string 7+ null=7+ default=null
protocol_name string null=7+
leader string
member_id string
members []
    member_id string
    group_instance_id string 5+ null=5+ default=null
    metadata bytes
""", flexible=6)

SYNC_GROUP_REQUEST = Message("SyncGroupRequest", """
group_id string
generation_id int32
member_id string
group_instance_id string 3+ null=3+ default=null
protocol_type string 5+ null=5+ default=null
protocol_name string 5+ null=5+ default=null
assignments []
    member_id string
    assignment bytes
""", flexible=4)

SYNC_GROUP_RESPONSE = Message("SyncGroupResponse", """
throttle_time_ms int32 1+
error_code int16
protocol_type string 5+ null=5+ default=null
protocol_name string 5+ null=5+ default=null
assignment bytes
""", flexible=4)

HEARTBEAT_REQUEST = Message("HeartbeatRequest", """
group_id string
generation_id int32
member_id string
group_instance_id string 3+ null=3+ default=null
""", flexible=4)

HEARTBEAT_RESPONSE = Message("HeartbeatResponse", """
throttle_time_ms int32 1+
error_code int16
""", flexible=4)

LEAVE_GROUP_REQUEST = Message("LeaveGroupRequest", """
group_id string
member_id string 0-2
members [] 3+
    member_id string 3+
    group_instance_id string 3+ null=3+ default=null
""", flexible=4)

LEAVE_GROUP_RESPONSE = Message("LeaveGroupResponse", """
throttle_time_ms int32 1+
error_code int16
members [] 3+
    member_id string 3+
    group_instance_id string 3+ null=3+
    error_code int16 3+
""", flexible=4)

OFFSET_COMMIT_REQUEST = Message("OffsetCommitRequest", """
group_id string
generation_id_or_member_epoch int32 default=-1
member_id string
group_instance_id string 7+ null=7+ default=null
retention_time_ms int64 2-4 default=-1
topics []
    name string
    partitions []
        partition_index int32
        committed_offset int64
        committed_leader_epoch int32 6+ default=-1
        committed_metadata string null
""", flexible=8)

OFFSET_COMMIT_RESPONSE = Message("OffsetCommitResponse", """
throttle_time_ms int32 3+
topics []
    name string
    partitions []
        partition_index int32
        error_code int16
""", flexible=8)

OFFSET_FETCH_REQUEST = Message("OffsetFetchRequest", """
group_id string 1-7
topics [] 1-7 null=2-7
    name string 1-7
    partition_indexes []int32 1-7
groups [] 8+
    group_id string 8+
    topics [] 8+ null=8+
        name string 8+
        partition_indexes []int32 8+
require_stable bool 7+ default=false
""", flexible=6)

OFFSET_FETCH_RESPONSE = Message("OffsetFetchResponse", """
throttle_time_ms int32 3+
topics [] 1-7
    name string 1-7
    partitions [] 1-7
        partition_index int32 1-7
        committed_offset int64 1-7
        committed_leader_epoch int32 5-7 default=-1
        metadata string 1-7 null=1-7
        error_code int16 1-7
error_code int16 2-7 default=0
groups [] 8+
    group_id string 8+
    topics [] 8+
        name string 8+
        partitions [] 8+
            partition_index int32 8+
            committed_offset int64 8+
            committed_leader_epoch int32 8+ default=-1
            metadata string 8+ null=8+
            error_code int16 8+
    error_code int16 8+ default=0
""", flexible=6)

DESCRIBE_GROUPS_REQUEST = Message("DescribeGroupsRequest", """
groups []string
include_authorized_operations bool 3+
""", flexible=5)

DESCRIBE_GROUPS_RESPONSE = Message("DescribeGroupsResponse", """
throttle_time_ms int32 1+
groups []
    error_code int16
    group_id string
    group_state string
    protocol_type string
    protocol_data string
    members []
        member_id string
        group_instance_id string 4+ null=4+ default=null
        client_id string
        client_host string
        member_metadata bytes
        member_assignment bytes
    authorized_operations int32 3+ default=-2147483648
""", flexible=5)

LIST_GROUPS_REQUEST = Message("ListGroupsRequest", """
states_filter []string 4+
""", flexible=3)

LIST_GROUPS_RESPONSE = Message("ListGroupsResponse", """
throttle_time_ms int32 1+
error_code int16
groups []
    group_id string
    protocol_type string
    group_state string 4+
""", flexible=3)

DELETE_GROUPS_REQUEST = Message("DeleteGroupsRequest", """
groups_names []string
""", flexible=2)

DELETE_GROUPS_RESPONSE = Message("DeleteGroupsResponse", """
throttle_time_ms int32
results []
    group_id string
    error_code int16
""", flexible=2)
