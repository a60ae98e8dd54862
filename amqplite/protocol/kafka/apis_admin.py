"""Schemas of the producer, SASL and admin APIs: InitProducerId, SaslHandshake,
SaslAuthenticate, DescribeConfigs, CreateTopics, DeleteTopics, CreatePartitions.

Field facts from Kafka's message definitions, cut to the versions amqplite serves
(see ``messages.SUPPORTED``); the text format is described in ``schema``.
"""

from __future__ import annotations

from amqplite.protocol.kafka.schema import Message

INIT_PRODUCER_ID_REQUEST = Message("InitProducerIdRequest", """
transactional_id string null
transaction_timeout_ms int32
producer_id int64 3+ default=-1
producer_epoch int16 3+ default=-1
""", flexible=2)

INIT_PRODUCER_ID_RESPONSE = Message("InitProducerIdResponse", """
throttle_time_ms int32
error_code int16
producer_id int64 default=-1
producer_epoch int16
""", flexible=2)

SASL_HANDSHAKE_REQUEST = Message("SaslHandshakeRequest", """
mechanism string
""", flexible=None)

SASL_HANDSHAKE_RESPONSE = Message("SaslHandshakeResponse", """
error_code int16
mechanisms []string
""", flexible=None)

SASL_AUTHENTICATE_REQUEST = Message("SaslAuthenticateRequest", """
auth_bytes bytes
""", flexible=2)

SASL_AUTHENTICATE_RESPONSE = Message("SaslAuthenticateResponse", """
error_code int16
error_message string null
auth_bytes bytes
session_lifetime_ms int64 1+ default=0
""", flexible=2)

DESCRIBE_CONFIGS_REQUEST = Message("DescribeConfigsRequest", """
resources []
    resource_type int8
    resource_name string
    configuration_keys []string null
include_synonyms bool 1+ default=false
include_documentation bool 3+ default=false
""", flexible=4)

DESCRIBE_CONFIGS_RESPONSE = Message("DescribeConfigsResponse", """
throttle_time_ms int32
results []
    error_code int16
    error_message string null
    resource_type int8
    resource_name string
    configs []
        name string
        value string null
        read_only bool
        is_default bool 0
        config_source int8 1+ default=-1
        is_sensitive bool
        synonyms [] 1+
            name string 1+
            value string 1+ null
            source int8 1+
        config_type int8 3+ default=0
        documentation string 3+ null
""", flexible=4)

CREATE_TOPICS_REQUEST = Message("CreateTopicsRequest", """
topics []
    name string
    num_partitions int32
    replication_factor int16
    assignments []
        partition_index int32
        broker_ids []int32
    configs []
        name string
        value string null
timeout_ms int32 default=60000
validate_only bool default=false
""", flexible=5)

CREATE_TOPICS_RESPONSE = Message("CreateTopicsResponse", """
throttle_time_ms int32
topics []
    name string
    topic_id uuid 7+
    error_code int16
    error_message string null
    topic_config_error_code int16 5+ tag=0
    num_partitions int32 5+ default=-1
    replication_factor int16 5+ default=-1
    configs [] 5+ null=5+
        name string 5+
        value string 5+ null=5+
        read_only bool 5+
        config_source int8 5+ default=-1
        is_sensitive bool 5+
""", flexible=5)

DELETE_TOPICS_REQUEST = Message("DeleteTopicsRequest", """
topics [] 6+
    name string 6+ null=6+ default=null
    topic_id uuid 6+
topic_names []string 1-5
timeout_ms int32
""", flexible=4)

DELETE_TOPICS_RESPONSE = Message("DeleteTopicsResponse", """
throttle_time_ms int32
responses []
    name string null=6+
    topic_id uuid 6+
    error_code int16
    error_message string 5+ null=5+ default=null
""", flexible=4)

CREATE_PARTITIONS_REQUEST = Message("CreatePartitionsRequest", """
topics []
    name string
    count int32
    assignments [] null
        broker_ids []int32
timeout_ms int32
validate_only bool
""", flexible=2)

CREATE_PARTITIONS_RESPONSE = Message("CreatePartitionsResponse", """
throttle_time_ms int32
results []
    name string
    error_code int16
    error_message string null default=null
""", flexible=2)
