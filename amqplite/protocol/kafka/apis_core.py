"""Schemas of the data-path APIs: ApiVersions, Metadata, Produce, Fetch, ListOffsets.

Field facts from Kafka's message definitions, cut to the versions amqplite serves
(see ``messages.SUPPORTED``); the text format is described in ``schema``.
"""

from __future__ import annotations

from amqplite.protocol.kafka.schema import Message

API_VERSIONS_REQUEST = Message("ApiVersionsRequest", """
client_software_name string 3+
client_software_version string 3+
""", flexible=3)

API_VERSIONS_RESPONSE = Message("ApiVersionsResponse", """
error_code int16
api_keys []
    api_key int16
    min_version int16
    max_version int16
throttle_time_ms int32 1+
supported_features [] 3+ tag=0
    name string 3+
    min_version int16 3+
    max_version int16 3+
finalized_features_epoch int64 3+ tag=1 default=-1
finalized_features [] 3+ tag=2
    name string 3+
    max_version_level int16 3+
    min_version_level int16 3+
zk_migration_ready bool 3+ tag=3 default=false
""", flexible=3)

METADATA_REQUEST = Message("MetadataRequest", """
topics [] null=1+
    topic_id uuid 10+
    name string null=10+
allow_auto_topic_creation bool 4+ default=true
include_cluster_authorized_operations bool 8-10
include_topic_authorized_operations bool 8+
""", flexible=9)

METADATA_RESPONSE = Message("MetadataResponse", """
throttle_time_ms int32 3+
brokers []
    node_id int32
    host string
    port int32
    rack string 1+ null=1+ default=null
cluster_id string 2+ null=2+ default=null
controller_id int32 1+ default=-1
topics []
    error_code int16
    name string null=12+
    topic_id uuid 10+
    is_internal bool 1+ default=false
    partitions []
        error_code int16
        partition_index int32
        leader_id int32
        leader_epoch int32 7+ default=-1
        replica_nodes []int32
        isr_nodes []int32
        offline_replicas []int32 5+
    topic_authorized_operations int32 8+ default=-2147483648
cluster_authorized_operations int32 8-10 default=-2147483648
""", flexible=9)

PRODUCE_REQUEST = Message("ProduceRequest", """
transactional_id string null default=null
acks int16
timeout_ms int32
topic_data []
    name string
    partition_data []
        index int32
        records records null
""", flexible=9)

PRODUCE_RESPONSE = Message("ProduceResponse", """
responses []
    name string
    partition_responses []
        index int32
        error_code int16
        base_offset int64
        log_append_time_ms int64 default=-1
        log_start_offset int64 5+ default=-1
        record_errors [] 8+
            batch_index int32 8+
            batch_index_error_message string 8+ null=8+ default=null
        error_message string 8+ null=8+ default=null
throttle_time_ms int32 default=0
""", flexible=9)

FETCH_REQUEST = Message("FetchRequest", """
cluster_id string 12+ null=12+ tag=0 default=null
replica_id int32 default=-1
max_wait_ms int32
min_bytes int32
max_bytes int32 default=0x7fffffff
isolation_level int8 default=0
session_id int32 7+ default=0
session_epoch int32 7+ default=-1
topics []
    topic string
    partitions []
        partition int32
        current_leader_epoch int32 9+ default=-1
        fetch_offset int64
        last_fetched_epoch int32 12+ default=-1
        log_start_offset int64 5+ default=-1
        partition_max_bytes int32
forgotten_topics_data [] 7+
    topic string 7+
    partitions []int32 7+
rack_id string 11+ default=
""", flexible=12)

FETCH_RESPONSE = Message("FetchResponse", """
throttle_time_ms int32
error_code int16 7+
session_id int32 7+ default=0
responses []
    topic string
    partitions []
        partition_index int32
        error_code int16
        high_watermark int64
        last_stable_offset int64 default=-1
        log_start_offset int64 5+ default=-1
        diverging_epoch {} 12+ tag=0
            epoch int32 12+ default=-1
            end_offset int64 12+ default=-1
        current_leader {} 12+ tag=1
            leader_id int32 12+ default=-1
            leader_epoch int32 12+ default=-1
        snapshot_id {} 12+ tag=2
            end_offset int64 default=-1
            epoch int32 default=-1
        aborted_transactions [] null
            producer_id int64
            first_offset int64
        preferred_read_replica int32 11+ default=-1
        records records null
""", flexible=12)

LIST_OFFSETS_REQUEST = Message("ListOffsetsRequest", """
replica_id int32
isolation_level int8 2+
topics []
    name string
    partitions []
        partition_index int32
        current_leader_epoch int32 4+ default=-1
        timestamp int64
""", flexible=6)

LIST_OFFSETS_RESPONSE = Message("ListOffsetsResponse", """
throttle_time_ms int32 2+
topics []
    name string
    partitions []
        partition_index int32
        error_code int16
        timestamp int64 default=-1
        offset int64 default=-1
        leader_epoch int32 4+ default=-1
""", flexible=6)
