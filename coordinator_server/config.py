"""Server settings: every option of `coordinator-server serve`, each also an environment
variable COORDINATOR_<OPTION> (upper case, dashes as underscores).

Kafka's group and offset settings keep their Kafka names (`offsets.commit.timeout.ms` is
`--offsets-commit-timeout-ms`) and Kafka's defaults.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    JsonValue,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from coordinator_server import defaults
from coordinator_server.consumer_group_settings import ConsumerGroupSettings
from coordinator_server.security_settings import SecuritySettings
from coordinator_server.storage.kafka.security import (
    EndpointIdentification,
    KafkaSecurity,
    SaslMechanism,
    SecurityProtocol,
)

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

# The concerns `serve --help` groups the settings by, in its order; each setting names
# its own in its declaration (`json_schema_extra=_in(...)`).
SETTING_GROUPS: dict[str, str] = {
    "listener": "where and how the server listens",
    "log": "the log: Kafka's topic or the embedded SQLite file, appends and loads",
    "cluster": "nodes sharing one Kafka log",
    "transactions": "the transaction coordinator",
    "groups": "Kafka's group coordinator settings, under their Kafka names",
    "limits": "what one connection, one request and the clients may make the server hold",
    "security": "TLS and authentication of the listener, and how every connection to Kafka "
    "is secured",
    "authorization": "who may do what: Kafka's ACLs",
    "metrics": "the operator's HTTP endpoint",
    "logging": "the server's own log lines",
}


def _in(group: str) -> dict[str, JsonValue]:
    """A setting's group in `serve --help` (one of SETTING_GROUPS)."""
    assert group in SETTING_GROUPS, group
    return {"group": group}


def setting_group(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    assert isinstance(extra, dict), field
    group = extra["group"]
    assert isinstance(group, str)
    return group


class CoordinatorConfig(SecuritySettings, ConsumerGroupSettings, BaseSettings):
    # Inputs stay out of validation errors: one of them may be a password.
    model_config = SettingsConfigDict(
        env_prefix="COORDINATOR_", extra="forbid", hide_input_in_errors=True
    )

    # Listener.
    host: str = Field(
        "127.0.0.1",
        description="Address to listen on (0.0.0.0 for all).",
        json_schema_extra=_in("listener"),
    )
    port: int = Field(
        9094,
        ge=0,
        le=65535,
        description="Port to listen on (0: any free port).",
        json_schema_extra=_in("listener"),
    )
    advertised_host: str | None = Field(
        None,
        description="Host FindCoordinator answers with (default: --host, or 127.0.0.1).",
        json_schema_extra=_in("listener"),
    )
    node_id: int = Field(
        0,
        ge=0,
        description="Node id FindCoordinator answers with.",
        json_schema_extra=_in("listener"),
    )
    max_frame_bytes: int = Field(
        defaults.MAX_FRAME_BYTES,
        ge=1024,
        description="Largest accepted request frame, in bytes.",
        json_schema_extra=_in("limits"),
    )
    max_connections: int = Field(
        defaults.MAX_CONNECTIONS,
        ge=1,
        description="Open connections beyond are refused.",
        json_schema_extra=_in("limits"),
    )
    max_inflight_requests: int = Field(
        defaults.MAX_INFLIGHT_REQUESTS,
        ge=1,
        description="Requests in flight per connection before it stops reading.",
        json_schema_extra=_in("limits"),
    )
    metrics_port: int = Field(
        9095,
        ge=-1,
        le=65535,
        description="HTTP port of /metrics, /healthz, /readyz, /status "
        "(0: any free port; -1: off).",
        json_schema_extra=_in("metrics"),
    )
    lag_refresh_interval_ms: int = Field(
        defaults.LAG_REFRESH_INTERVAL_MS,
        ge=0,
        description="How often each group's consumer lag (its committed offsets against the "
        "data cluster's log end offsets) is computed for /metrics (0: off). Needs a Kafka "
        "cluster: --lag-bootstrap-servers, or the log's.",
        json_schema_extra=_in("metrics"),
    )
    lag_max_series: int = Field(
        defaults.LAG_MAX_SERIES,
        ge=1,
        description="The most (group, topic, partition) series of consumer lag on /metrics; "
        "the committed offsets past it are left out and counted.",
        json_schema_extra=_in("metrics"),
    )
    lag_bootstrap_servers: str | None = Field(
        None,
        description="The Kafka cluster the consumers read from, for their lag and "
        "--offset-commit-check-partitions (default: the log's --bootstrap-servers; the "
        "--kafka-* security settings apply).",
        json_schema_extra=_in("metrics"),
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as plain text or as JSON objects.",
        json_schema_extra=_in("logging"),
    )
    tls_certfile: Path | None = Field(
        None,
        description="PEM certificate (chain) to serve TLS with; absent: plain TCP.",
        json_schema_extra=_in("security"),
    )
    tls_keyfile: Path | None = Field(
        None,
        description="PEM private key of --tls-certfile (if not in the same file).",
        json_schema_extra=_in("security"),
    )
    shutdown_timeout_ms: int = Field(
        10000,
        ge=0,
        description="How long SIGTERM waits for in-flight requests and writes.",
        json_schema_extra=_in("listener"),
    )

    # Limits of one connection and of one request (availability, not trust).
    max_connections_per_ip: int = Field(
        defaults.MAX_CONNECTIONS_PER_IP,
        ge=1,
        description="max.connections.per.ip: open connections from one address; beyond, the "
        "connection idle longest is closed to make room or the new one is refused.",
        json_schema_extra=_in("limits"),
    )
    connections_max_idle_ms: int = Field(
        defaults.CONNECTIONS_MAX_IDLE_MS,
        ge=1,
        description="connections.max.idle.ms: a connection with nothing in flight and no "
        "request for this long is closed.",
        json_schema_extra=_in("limits"),
    )
    frame_read_timeout_ms: int = Field(
        defaults.FRAME_READ_TIMEOUT_MS,
        ge=1,
        description="A request frame that started must arrive whole within this time, or its "
        "connection is closed.",
        json_schema_extra=_in("limits"),
    )
    max_inflight_request_bytes: int = Field(
        defaults.MAX_INFLIGHT_REQUEST_BYTES,
        ge=1024,
        description="Bytes of requests in flight or waiting per connection before it stops "
        "reading (at least one frame is always taken).",
        json_schema_extra=_in("limits"),
    )
    max_response_bytes: int = Field(
        defaults.MAX_RESPONSE_BYTES,
        ge=1024,
        description="Largest answer; a larger one is answered MESSAGE_TOO_LARGE instead.",
        json_schema_extra=_in("limits"),
    )
    response_buffer_bytes: int = Field(
        defaults.RESPONSE_BUFFER_BYTES,
        ge=1024,
        description="Bytes of answers waiting for a slow reader before the server stops "
        "reading that connection's requests.",
        json_schema_extra=_in("limits"),
    )
    response_buffer_max_bytes: int = Field(
        defaults.RESPONSE_BUFFER_MAX_BYTES,
        ge=1024,
        description="Bytes of answers waiting for a slow reader before the connection is closed.",
        json_schema_extra=_in("limits"),
    )
    response_buffer_total_bytes: int = Field(
        defaults.RESPONSE_BUFFER_TOTAL_BYTES,
        ge=1024,
        description="Bytes of answers waiting for every slow reader together (the connections "
        "past --response-buffer-bytes); past it, the slow reader whose answers go over it is "
        "closed.",
        json_schema_extra=_in("limits"),
    )
    response_write_timeout_ms: int = Field(
        defaults.RESPONSE_WRITE_TIMEOUT_MS,
        ge=1,
        description="Answers a client leaves unread this long close its connection.",
        json_schema_extra=_in("limits"),
    )

    # The log.
    bootstrap_servers: str | None = Field(
        None,
        description="Kafka bootstrap servers; absent: the embedded SQLite log.",
        json_schema_extra=_in("log"),
    )
    offsets_topic: str = Field(
        "__coordinator_offsets", description="The log's Kafka topic.", json_schema_extra=_in("log")
    )
    offsets_topic_partitions: int = Field(
        50,
        ge=1,
        le=100000,
        description="Partitions of the log (must not change once used).",
        json_schema_extra=_in("log"),
    )
    offsets_topic_replication_factor: int = Field(
        3,
        ge=1,
        le=32767,
        description="Replication factor of the log topic when created.",
        json_schema_extra=_in("log"),
    )
    data_dir: Path = Field(
        Path("data"),
        description="Directory of the embedded SQLite log.",
        json_schema_extra=_in("log"),
    )

    # The cluster: nodes on one Kafka log share its partitions.
    cluster: Literal["on", "off"] = Field(
        "on",
        description="With the Kafka log, share the log's partitions with every node on the "
        "same bootstrap servers and topic, each partition fenced to its owner (needs Kafka's "
        "transactions); off: this node writes every partition alone (a broker without "
        "transactions, such as tansu).",
        json_schema_extra=_in("cluster"),
    )
    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="Processes to run on this machine, each a node of the cluster on its own "
        "port (--port up; --node-id and --metrics-port up likewise), started, restarted and "
        "stopped as one (needs the Kafka log and --cluster on).",
        json_schema_extra=_in("cluster"),
    )
    cluster_id: str | None = Field(
        None,
        description="The cluster's name: its Kafka consumer group and the prefix of its "
        "transactional ids (default: coordinator-server.<offsets-topic>).",
        json_schema_extra=_in("cluster"),
    )
    cluster_session_timeout_ms: int = Field(
        defaults.CLUSTER_SESSION_TIMEOUT_MS,
        ge=1,
        description="How long Kafka waits for a silent node before giving its partitions to "
        "the others (the cluster group's session.timeout.ms).",
        json_schema_extra=_in("cluster"),
    )
    cluster_heartbeat_interval_ms: int = Field(
        defaults.CLUSTER_HEARTBEAT_INTERVAL_MS,
        ge=1,
        description="How often a node tells Kafka it is alive (heartbeat.interval.ms); a "
        "third of the session timeout at most.",
        json_schema_extra=_in("cluster"),
    )
    cluster_standby: Literal["on", "off"] = Field(
        "on",
        description="In a cluster, keep the partitions this node stands by for loaded from "
        "the log (warm standbys), so that taking one over reads only its newest records; "
        "off: a partition taken over is loaded whole.",
        json_schema_extra=_in("cluster"),
    )
    standby_fetch_max_wait_ms: int = Field(
        defaults.STANDBY_FETCH_MAX_WAIT_MS,
        ge=0,
        description="How long a standby's read of the log waits for new records (a long "
        "poll: new records arrive at once; an idle log costs a request this often).",
        json_schema_extra=_in("cluster"),
    )
    standby_fetch_max_bytes: int = Field(
        defaults.STANDBY_FETCH_MAX_BYTES,
        ge=1024,
        description="The most record bytes one read of the standby partitions brings in.",
        json_schema_extra=_in("cluster"),
    )
    transactions: Literal["auto", "on", "off"] = Field(
        "auto",
        description="The transaction coordinator (InitProducerId, AddPartitionsToTxn, EndTxn, "
        "TxnOffsetCommit, ...), for transactions on the Kafka cluster of the log. It needs "
        "the brokers to take markers from outside (transaction.partition.verification.enable"
        "=false, checked at start): auto serves transactions when the check passes and "
        "otherwise logs why not; on refuses to start without them; off never serves them. "
        "The embedded log has no Kafka cluster: no transactions.",
        json_schema_extra=_in("transactions"),
    )
    transaction_max_timeout_ms: int = Field(
        defaults.TRANSACTION_MAX_TIMEOUT_MS,
        ge=1,
        description="The longest transaction timeout a producer may ask for "
        "(transaction.max.timeout.ms).",
        json_schema_extra=_in("transactions"),
    )
    transactional_id_expiration_ms: int = Field(
        defaults.TRANSACTIONAL_ID_EXPIRATION_MS,
        ge=1,
        description="A transactional id with no transaction for this long is forgotten "
        "(transactional.id.expiration.ms).",
        json_schema_extra=_in("transactions"),
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        defaults.TRANSACTION_ABORT_TIMED_OUT_INTERVAL_MS,
        ge=1,
        description="How often transactions past their timeout are looked for and aborted "
        "(transaction.abort.timed.out.transaction.cleanup.interval.ms).",
        json_schema_extra=_in("transactions"),
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        defaults.TRANSACTION_REMOVE_EXPIRED_INTERVAL_MS,
        ge=1,
        description="How often expired transactional ids are looked for "
        "(transaction.remove.expired.transaction.cleanup.interval.ms).",
        json_schema_extra=_in("transactions"),
    )
    transaction_producer_id_start: int | None = Field(
        None,
        ge=0,
        description="The first producer id of a range this coordinator hands out ids from. "
        "Unset (with --transaction-producer-id-end): every id comes from the Kafka cluster "
        "itself, unique across every deployment and Kafka producer. Set: the range must not "
        "overlap the ids the Kafka cluster hands out (from 0 up, in blocks of 1000) nor another "
        f"deployment's; the range's start defaults to {defaults.TRANSACTION_PRODUCER_ID_START}.",
        json_schema_extra=_in("transactions"),
    )
    transaction_producer_id_end: int | None = Field(
        None,
        ge=1,
        description="The end (exclusive) of this coordinator's producer id range; setting it "
        f"sets a range (default end {defaults.TRANSACTION_PRODUCER_ID_END}).",
        json_schema_extra=_in("transactions"),
    )
    max_transactional_ids: int = Field(
        defaults.MAX_TRANSACTIONAL_IDS,
        ge=1,
        description="The most transactional ids this node holds over all its partitions; "
        "past it, a new id is refused (POLICY_VIOLATION).",
        json_schema_extra=_in("transactions"),
    )
    max_partitions_per_transaction: int = Field(
        defaults.MAX_PARTITIONS_PER_TRANSACTION,
        ge=1,
        description="The most partitions one transaction may write to (POLICY_VIOLATION past it).",
        json_schema_extra=_in("transactions"),
    )
    max_pending_transactional_offsets: int = Field(
        defaults.MAX_PENDING_TRANSACTIONAL_OFFSETS,
        ge=1,
        description="The most transactional offsets one partition of the log holds pending "
        "(TxnOffsetCommit's, until their transaction ends); past it, a TxnOffsetCommit is "
        "refused (INVALID_COMMIT_OFFSET_SIZE).",
        json_schema_extra=_in("transactions"),
    )
    transaction_max_queued_markers: int = Field(
        defaults.TRANSACTION_MAX_QUEUED_MARKERS,
        ge=1,
        description="The most transaction markers waiting to be written to the Kafka "
        "cluster's partitions; past it, ending a transaction waits.",
        json_schema_extra=_in("transactions"),
    )
    transaction_concurrent_wait_ms: int = Field(
        defaults.TRANSACTION_CONCURRENT_WAIT_MS,
        ge=0,
        description="How long an InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn or "
        "EndTxn waits while the same transactional id's previous transaction is being ended "
        "here (its markers on their way) before it is answered CONCURRENT_TRANSACTIONS; it "
        "goes on as soon as that ends, with the answer the client's retry would have got "
        "a back-off later. 0: answer at once, as Kafka does.",
        json_schema_extra=_in("transactions"),
    )
    standby_fetch_min_bytes: int = Field(
        defaults.STANDBY_FETCH_MIN_BYTES,
        ge=1,
        description="How many record bytes a standby's read waits for (up to "
        "standby-fetch-max-wait-ms) before it answers: a busy log is read in rounds of this "
        "many bytes rather than one per append.",
        json_schema_extra=_in("cluster"),
    )
    standby_max_pending_records: int = Field(
        defaults.STANDBY_MAX_PENDING_RECORDS,
        ge=1,
        description="How many records a standby holds read but not yet replayed into its "
        "state (the latest of each key, as compaction would leave them) before it replays "
        "them; looked at after each read, so it may hold up to one read's more. Also "
        "replayed when the log is quiet, and first thing at a takeover.",
        json_schema_extra=_in("cluster"),
    )
    append_linger_ms: int = Field(
        defaults.APPEND_LINGER_MS,
        ge=-1,
        description="Linger before appending a batch; -1: adaptive (flush when idle).",
        json_schema_extra=_in("log"),
    )
    max_batch_bytes: int = Field(
        defaults.MAX_BATCH_BYTES,
        ge=1024,
        description="Largest batch of records appended at once, in bytes.",
        json_schema_extra=_in("log"),
    )
    max_inflight_produce_requests: int = Field(
        1,
        ge=1,
        le=1000,
        description="ProduceRequests on the way to one Kafka broker at once; the batches "
        "that wait meanwhile leave together in the next one.",
        json_schema_extra=_in("log"),
    )
    max_queued_events: int = Field(
        defaults.MAX_QUEUED_EVENTS,
        ge=1,
        description="Operations queued per partition before new ones are refused.",
        json_schema_extra=_in("log"),
    )
    metadata_max_age_ms: int = Field(
        30000,
        ge=100,
        description="metadata.max.age.ms: how often the log topic's metadata is refreshed and "
        "its partition count checked, and how long the data cluster's topic metadata is "
        "trusted (the markers' leaders, the partition checks).",
        json_schema_extra=_in("log"),
    )
    append_failure_timeout_ms: int = Field(
        defaults.APPEND_FAILURE_TIMEOUT_MS,
        ge=1,
        description="A partition whose appends have all failed for this long leaves ACTIVE "
        "(and is loaded again once the log takes writes).",
        json_schema_extra=_in("log"),
    )
    log_level: LogLevel = Field("INFO", description="Log level.", json_schema_extra=_in("logging"))

    # How every connection to Kafka is secured, under Kafka's client names (librdkafka's
    # for the PEM files).
    kafka_security_protocol: SecurityProtocol = Field(
        "PLAINTEXT",
        description="security.protocol of every connection to Kafka: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL.",
        json_schema_extra=_in("security"),
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        "PLAIN",
        description="sasl.mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
        json_schema_extra=_in("security"),
    )
    kafka_sasl_username: str | None = Field(
        None, description="sasl.username.", json_schema_extra=_in("security")
    )
    kafka_sasl_password: SecretStr | None = Field(
        None,
        description="sasl.password (better from the environment or a file than on the "
        "command line, where other users of the machine can read it).",
        json_schema_extra=_in("security"),
    )
    kafka_sasl_password_file: Path | None = Field(
        None,
        description="A file whose first line is the SASL password.",
        json_schema_extra=_in("security"),
    )
    kafka_ssl_ca_location: Path | None = Field(
        None,
        description="ssl.ca.location: PEM file of the CAs that sign the brokers' "
        "certificates (absent: the system's CAs).",
        json_schema_extra=_in("security"),
    )
    kafka_ssl_certificate_location: Path | None = Field(
        None,
        description="ssl.certificate.location: PEM client certificate (mutual TLS).",
        json_schema_extra=_in("security"),
    )
    kafka_ssl_key_location: Path | None = Field(
        None,
        description="ssl.key.location: PEM private key of the client certificate.",
        json_schema_extra=_in("security"),
    )
    kafka_ssl_key_password: SecretStr | None = Field(
        None,
        description="ssl.key.password: the password of an encrypted private key.",
        json_schema_extra=_in("security"),
    )
    kafka_ssl_endpoint_identification_algorithm: EndpointIdentification = Field(
        "https",
        description="ssl.endpoint.identification.algorithm: https checks the broker's host "
        "name against its certificate; none does not (the CA is checked either way).",
        json_schema_extra=_in("security"),
    )

    # Kafka's group coordinator settings, under their Kafka names.
    offsets_commit_timeout_ms: int = Field(
        defaults.OFFSETS_COMMIT_TIMEOUT_MS,
        ge=1,
        description="offsets.commit.timeout.ms: how long a write may wait for the log.",
        json_schema_extra=_in("groups"),
    )
    offset_metadata_max_bytes: int = Field(
        defaults.OFFSET_METADATA_MAX_BYTES,
        ge=0,
        description="offset.metadata.max.bytes: largest commit metadata.",
        json_schema_extra=_in("groups"),
    )
    offset_commit_check_partitions: bool = Field(
        False,
        description="OffsetCommit and TxnOffsetCommit refuse, with UNKNOWN_TOPIC_OR_PARTITION, "
        "each partition the Kafka cluster the consumers read from does not have, and commit "
        "the rest (Kafka's check); off: offsets of any topic and partition are taken. Needs "
        "that cluster: --lag-bootstrap-servers, or the log's --bootstrap-servers.",
        json_schema_extra=_in("groups"),
    )
    offsets_retention_minutes: int = Field(
        defaults.OFFSETS_RETENTION_MINUTES,
        ge=1,
        description="offsets.retention.minutes: how long offsets of empty groups live.",
        json_schema_extra=_in("groups"),
    )
    offsets_retention_check_interval_ms: int = Field(
        defaults.OFFSETS_RETENTION_CHECK_INTERVAL_MS,
        ge=1,
        description="offsets.retention.check.interval.ms: expiration scan period.",
        json_schema_extra=_in("groups"),
    )
    group_initial_rebalance_delay_ms: int = Field(
        defaults.GROUP_INITIAL_REBALANCE_DELAY_MS,
        ge=0,
        description="group.initial.rebalance.delay.ms: wait for joins of a new group.",
        json_schema_extra=_in("groups"),
    )
    group_min_session_timeout_ms: int = Field(
        defaults.GROUP_MIN_SESSION_TIMEOUT_MS,
        ge=1,
        description="group.min.session.timeout.ms: shortest member session timeout.",
        json_schema_extra=_in("groups"),
    )
    group_max_session_timeout_ms: int = Field(
        defaults.GROUP_MAX_SESSION_TIMEOUT_MS,
        ge=1,
        description="group.max.session.timeout.ms: longest member session timeout.",
        json_schema_extra=_in("groups"),
    )
    group_max_size: int = Field(
        defaults.GROUP_MAX_SIZE,
        ge=1,
        description="group.max.size: most members in one group.",
        json_schema_extra=_in("groups"),
    )

    # Limits on what clients may make the coordinator hold.
    max_id_length: int = Field(
        defaults.MAX_ID_LENGTH,
        ge=1,
        description="Longest group id, group instance id, client id, protocol type or name and "
        "topic name, in characters (member ids: this plus the generated suffix).",
        json_schema_extra=_in("limits"),
    )
    max_member_metadata_bytes: int = Field(
        1024 * 1024,
        ge=1,
        description="Largest member metadata (all of a JoinGroup's protocols together) and "
        "largest member assignment.",
        json_schema_extra=_in("limits"),
    )
    max_groups: int = Field(
        defaults.MAX_GROUPS,
        ge=1,
        description="Most groups this node holds; new ones beyond are refused.",
        json_schema_extra=_in("limits"),
    )
    max_committed_offsets_per_group: int = Field(
        defaults.MAX_COMMITTED_OFFSETS_PER_GROUP,
        ge=1,
        description="Most committed offsets one group holds; commits of new partitions beyond "
        "are refused.",
        json_schema_extra=_in("limits"),
    )
    max_acls: int = Field(
        defaults.MAX_ACLS,
        ge=1,
        description="Most ACLs the coordinator keeps (CreateAcls, in the log's partition 0); "
        "new ones beyond are refused (POLICY_VIOLATION).",
        json_schema_extra=_in("limits"),
    )
    max_scram_users: int = Field(
        defaults.MAX_SCRAM_USERS,
        ge=1,
        description="Most users with SCRAM credentials (AlterUserScramCredentials, in the "
        "log's partition 0); new users beyond are refused (POLICY_VIOLATION).",
        json_schema_extra=_in("limits"),
    )
    security_fetch_max_wait_ms: int = Field(
        defaults.SECURITY_FETCH_MAX_WAIT_MS,
        ge=1,
        le=900,
        description="How often each node reads the ACLs and SCRAM credentials in the log "
        "again (a write answered through the node is read at once). Under a second, so that "
        "every node sees a change within one.",
        json_schema_extra=_in("authorization"),
    )

    _kafka_security: KafkaSecurity = PrivateAttr(default_factory=KafkaSecurity)

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism", mode="before")
    @classmethod
    def _kafka_name_in_upper_case(cls, value: object) -> object:
        # Kafka reads them in any case (sasl_ssl is SASL_SSL).
        return value.upper() if isinstance(value, str) else value

    @field_validator("kafka_ssl_endpoint_identification_algorithm", mode="before")
    @classmethod
    def _no_endpoint_identification(cls, value: object) -> object:
        # Kafka turns the check off with an empty value.
        return (value.lower() or "none") if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_ranges(self) -> CoordinatorConfig:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group-min-session-timeout-ms exceeds group-max-session-timeout-ms")
        if self.response_buffer_max_bytes > self.response_buffer_total_bytes:
            raise ValueError(
                "response-buffer-max-bytes exceeds response-buffer-total-bytes: one slow "
                "reader may hold what all of them together may"
            )
        if self.response_buffer_bytes + self.max_response_bytes > self.response_buffer_max_bytes:
            # Reading stops at response-buffer-bytes, but one answer already on its way may
            # add up to max-response-bytes: below their sum, one large answer would close a
            # client that reads.
            raise ValueError(
                "response-buffer-max-bytes must be at least response-buffer-bytes plus "
                "max-response-bytes"
            )
        if self.cluster_heartbeat_interval_ms * 3 > self.cluster_session_timeout_ms:
            raise ValueError(
                "cluster-heartbeat-interval-ms must be at most a third of "
                "cluster-session-timeout-ms"
            )
        producer_id_range = self.transaction_producer_id_range
        if producer_id_range is not None:
            start, end = producer_id_range
            if start >= end:
                raise ValueError(
                    "transaction-producer-id-start must be below transaction-producer-id-end"
                )
            if end > 2**63 - 1:
                raise ValueError("transaction-producer-id-end must fit a producer id (2**63 - 1)")
        if self.tls_keyfile is not None and self.tls_certfile is None:
            raise ValueError("tls-keyfile needs tls-certfile")
        if self.workers > 1 and (self.bootstrap_servers is None or self.cluster != "on"):
            # Workers share the log's partitions as the nodes of a cluster do; the embedded
            # log is one process's file.
            raise ValueError(
                "workers above 1 need the Kafka log (--bootstrap-servers) and --cluster on"
            )
        if self.workers > 1:
            self._check_worker_ports()
        self.check_security(tls=self.tls_certfile is not None)
        self.check_consumer_groups()
        if self.offset_commit_check_partitions and self.data_cluster is None:
            # Not checking while asked to would commit what the check is there to refuse.
            raise ValueError(
                "offset-commit-check-partitions needs the Kafka cluster the consumers read "
                "from: set --lag-bootstrap-servers, or the log's --bootstrap-servers"
            )
        self._kafka_security = self._build_kafka_security()
        return self

    def workers_metrics_port(self) -> int:
        """The metrics port of worker 0 with `--workers` above 1: `--metrics-port` when
        given, else the port after the workers' listeners (`--port + --workers`), so that
        the defaults (9094, 9095) do not give worker 1's listener worker 0's metrics port."""
        if "metrics_port" in self.model_fields_set or self.metrics_port <= 0 or not self.port:
            return self.metrics_port
        return self.port + self.workers

    def _check_worker_ports(self) -> None:
        workers = self.workers
        if self.port and self.port + workers - 1 > 65535:
            raise ValueError("port + workers - 1 must be a port (65535 at most)")
        metrics = self.workers_metrics_port()
        if metrics > 0 and metrics + workers - 1 > 65535:
            raise ValueError("metrics-port + workers - 1 must be a port (65535 at most)")
        if self.port and metrics > 0 and abs(metrics - self.port) < workers:
            raise ValueError(
                f"with {workers} workers, ports {self.port} to {self.port + workers - 1} and "
                f"metrics ports {metrics} to {metrics + workers - 1} overlap: set "
                f"--metrics-port to {self.port + workers} or more"
            )

    def _build_kafka_security(self) -> KafkaSecurity:
        try:
            return KafkaSecurity.build(
                security_protocol=self.kafka_security_protocol,
                sasl_mechanism=self.kafka_sasl_mechanism,
                sasl_username=self.kafka_sasl_username,
                sasl_password=self.kafka_sasl_password,
                sasl_password_file=self.kafka_sasl_password_file,
                ssl_ca_location=self.kafka_ssl_ca_location,
                ssl_certificate_location=self.kafka_ssl_certificate_location,
                ssl_key_location=self.kafka_ssl_key_location,
                ssl_key_password=self.kafka_ssl_key_password,
                ssl_endpoint_identification_algorithm=(
                    self.kafka_ssl_endpoint_identification_algorithm
                ),
            )
        except ValueError as error:
            raise ValueError(f"kafka security: {error}") from None

    @property
    def kafka_security(self) -> KafkaSecurity:
        """How every connection to Kafka is secured (the password file read once)."""
        return self._kafka_security

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or None for plain TCP."""
        if self.tls_certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls_certfile, self.tls_keyfile)
        if self.ssl_client_auth != "none":
            assert self.ssl_truststore_location is not None
            context.load_verify_locations(cafile=self.ssl_truststore_location)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
            )
        return context

    def peer_ssl_context(self) -> ssl.SSLContext | None:
        """How this node reaches the other nodes of its cluster (their WriteTxnMarkers): over
        TLS when the nodes serve TLS, trusting the system's certificate authorities."""
        if self.tls_certfile is None:
            return None
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)

    @property
    def listener_protocol(self) -> str:
        """The listener's security.protocol, its default applied."""
        return self.listener_protocol_with(tls=self.tls_certfile is not None)

    @property
    def clustered(self) -> bool:
        """Whether this node shares its log with others (the Kafka log, cluster on)."""
        return bool(self.bootstrap_servers) and self.cluster == "on"

    @property
    def data_cluster(self) -> str | None:
        """The Kafka cluster the consumers read from: --lag-bootstrap-servers, else the
        log's (None: neither is set)."""
        return self.lag_bootstrap_servers or self.bootstrap_servers or None

    @property
    def lag_cluster(self) -> str | None:
        """The data cluster whose end offsets the consumer lag reads (None: lag is off)."""
        if self.lag_refresh_interval_ms == 0:
            return None
        return self.lag_bootstrap_servers or self.bootstrap_servers or None

    @property
    def transaction_producer_id_range(self) -> tuple[int, int] | None:
        """The range [start, end) producer ids come from when either bound is set; None:
        they come from the Kafka cluster."""
        start, end = self.transaction_producer_id_start, self.transaction_producer_id_end
        if start is None and end is None:
            return None
        return (
            defaults.TRANSACTION_PRODUCER_ID_START if start is None else start,
            defaults.TRANSACTION_PRODUCER_ID_END if end is None else end,
        )

    @property
    def transactions_wanted(self) -> bool:
        """Whether this server should coordinate transactions (a Kafka log and not off)."""
        return bool(self.bootstrap_servers) and self.transactions != "off"

    @property
    def cluster_name(self) -> str:
        return self.cluster_id or f"coordinator-server.{self.offsets_topic}"

    @property
    def advertised(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
