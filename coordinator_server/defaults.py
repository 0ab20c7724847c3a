"""The default of every setting the server offers, in one place (Kafka's default where Kafka
has the setting).

The server's configuration (`config.py`) and the layers' own configurations (`RuntimeConfig`,
`GroupsConfig`, `OffsetsConfig`) both take their defaults from here, so that a state machine
built with its configuration's defaults, as tests build it, behaves as the server does. A leaf:
it imports nothing, so every layer may read it.
"""

from __future__ import annotations

# The runtime: how long a write may wait for the log (Kafka's offsets.commit.timeout.ms), how
# appends are batched (group.coordinator.append.linger.ms: -1 adaptive; the largest batch), how
# many events a partition may queue, and how long a partition's appends may all fail before it
# goes FAILED.
OFFSETS_COMMIT_TIMEOUT_MS = 5000
APPEND_LINGER_MS = -1
MAX_BATCH_BYTES = 1024 * 1024
MAX_QUEUED_EVENTS = 100_000
APPEND_FAILURE_TIMEOUT_MS = 30_000

# The cluster's own group membership, at Kafka (a node's session.timeout.ms and
# heartbeat.interval.ms in the cluster's consumer group): a node that dies loses its
# partitions to the others after the session timeout.
CLUSTER_SESSION_TIMEOUT_MS = 10_000
CLUSTER_HEARTBEAT_INTERVAL_MS = 1000

# Warm standbys: how long a standby's read of the log waits for new records (a long poll),
# and the most bytes one read of all its partitions brings in.
STANDBY_FETCH_MAX_WAIT_MS = 500
STANDBY_FETCH_MAX_BYTES = 16 * 1024 * 1024
# How many bytes a standby's read waits for (up to its max wait): a busy log is read in
# rounds of about this size instead of a round per append.
STANDBY_FETCH_MIN_BYTES = 1024 * 1024
# How many records a standby holds read but not yet replayed (the latest per key) before it
# replays them, looked at after each read: a takeover replays at most this many plus a read's.
STANDBY_MAX_PENDING_RECORDS = 100_000

# The classic group protocol (Kafka's group.* settings).
GROUP_INITIAL_REBALANCE_DELAY_MS = 3000
GROUP_MIN_SESSION_TIMEOUT_MS = 6000
GROUP_MAX_SESSION_TIMEOUT_MS = 1_800_000
GROUP_MAX_SIZE = 2_147_483_647

# Committed offsets (Kafka's offsets.* and offset.* settings).
OFFSET_METADATA_MAX_BYTES = 4096
OFFSETS_RETENTION_MINUTES = 10080
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000

# What clients may make the coordinator hold.
MAX_ID_LENGTH = 1024
MAX_GROUPS = 1_000_000
MAX_COMMITTED_OFFSETS_PER_GROUP = 100_000
# Pending transactional offsets (TxnOffsetCommit's, until their transaction ends) that one
# log partition holds, over all its groups and producers.
MAX_PENDING_TRANSACTIONAL_OFFSETS = 100_000
MAX_RESPONSE_BYTES = 8 * 1024 * 1024

# Connections and requests (Kafka's socket.request.max.bytes, max.connections,
# max.connections.per.ip, connections.max.idle.ms where Kafka has them).
MAX_FRAME_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS = 10_000
MAX_CONNECTIONS_PER_IP = 2000
MAX_INFLIGHT_REQUESTS = 1024
MAX_INFLIGHT_REQUEST_BYTES = 64 * 1024 * 1024
RESPONSE_BUFFER_BYTES = 4 * 1024 * 1024
RESPONSE_BUFFER_MAX_BYTES = 64 * 1024 * 1024
# Answers left unread by every slow reader together.
RESPONSE_BUFFER_TOTAL_BYTES = 256 * 1024 * 1024
CONNECTIONS_MAX_IDLE_MS = 600_000
FRAME_READ_TIMEOUT_MS = 30_000
RESPONSE_WRITE_TIMEOUT_MS = 60_000

# The log's partitions (the server's --offsets-topic-partitions).
OFFSETS_TOPIC_PARTITIONS = 50

# The transaction coordinator (Kafka's transaction.* settings): the longest transaction timeout
# a producer may ask for (transaction.max.timeout.ms), how long a transactional id outlives its
# last use (transactional.id.expiration.ms), and how often the coordinator aborts the timed-out
# transactions (transaction.abort.timed.out.transaction.cleanup.interval.ms) and removes the
# expired ids (transaction.remove.expired.transaction.cleanup.interval.ms).
TRANSACTION_MAX_TIMEOUT_MS = 900_000
TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000
TRANSACTION_ABORT_TIMED_OUT_INTERVAL_MS = 10_000
TRANSACTION_REMOVE_EXPIRED_INTERVAL_MS = 3_600_000
# Producer ids come from the Kafka cluster itself (InitProducerId without a transactional id to
# its brokers, which take them from the controller's blocks): this many are kept ready, and as
# many asked for at once when the pool runs low.
TRANSACTION_PRODUCER_IDS_READY = 64
# The range a deployment that sets one hands producer ids out of instead
# (--transaction-producer-id-start/-end): far above those a Kafka cluster's controller hands
# out (it counts up from 0 in blocks of 1000), split among the log's partitions.
TRANSACTION_PRODUCER_ID_START = 2**48
TRANSACTION_PRODUCER_ID_END = 2**63 - 1
# What clients may make one log partition hold.
MAX_TRANSACTIONAL_IDS = 1_000_000
MAX_PARTITIONS_PER_TRANSACTION = 100_000
# Transaction markers waiting to be written to the data partitions, over all transactions.
TRANSACTION_MAX_QUEUED_MARKERS = 100_000
# How long a request of a transactional id waits for its previous transaction's end under way
# (markers on their way) before it is answered CONCURRENT_TRANSACTIONS: a producer's next
# transaction starts as soon as the last one ended, not a client back-off later.
TRANSACTION_CONCURRENT_WAIT_MS = 100

# Consumer lag on /metrics: how often the data cluster's end offsets are read (0: never), and
# the most (group, topic, partition) series reported.
LAG_REFRESH_INTERVAL_MS = 30_000
LAG_MAX_SERIES = 10_000

# ACLs and SCRAM credentials, kept on the log's partition 0: the most ACLs (a DescribeAcls
# of them all still fits an answer) and the most users with SCRAM credentials; how long each
# node's read of the partition waits for new records (a long poll: a new record ends the wait
# at once; the wait is what a quiet log costs a round), and the most bytes one read brings.
MAX_ACLS = 10_000
MAX_SCRAM_USERS = 10_000
SECURITY_FETCH_MAX_WAIT_MS = 250
SECURITY_FETCH_MAX_BYTES = 1024 * 1024
