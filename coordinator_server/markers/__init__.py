"""Transaction markers on Apache Kafka's data partitions, written from outside the brokers.

A transaction's records on a Kafka partition stay invisible to read_committed consumers (and
hold back the partition's last stable offset) until a COMMIT or ABORT marker follows them.
Kafka's own transaction coordinator writes these markers with WriteTxnMarkers, a
broker-to-broker request (api key 27); our coordinator sends the same request from outside
the cluster (`KafkaTxnMarkerWriter`, in `writer.py`). The brokers accept it from any client
with CLUSTER_ACTION on the cluster (any client without ACLs).

What the cluster must allow, checked at start (`check_kafka_for_transactions`):

- `transaction.partition.verification.enable=false` on every broker (KIP-890's verification,
  on by default since Kafka 3.6). With it on, a broker that gets a transactional batch asks
  *its own* transaction coordinator whether the partition was added to the transaction
  (AddPartitionsToTxn, verify only). That coordinator knows nothing of transactions
  coordinated here, and the broker refuses the batch with NOT_ENOUGH_REPLICAS (19), "Unable
  to verify the partition has been added to the transaction. Underlying error:
  COORDINATOR_NOT_AVAILABLE" in the responses that carry a message (Produce v8 and later).
- WriteTxnMarkers v1 (Kafka 4 serves v1 and v2; v0 was removed in 4.0).

What Kafka 4.4 does with its transaction versions (found on a 4.4.0 broker formatted with
the storage tool's defaults, which finalize `transaction.version=2`, as
`kafka-storage version-mapping` prints for 4.4-IV2):

- With verification off, transactional Produce requests of v3 to v11 (transaction version
  1: the producer adds partitions through its coordinator, and it is ours) are written, and
  WriteTxnMarkers v1 markers at the batches' producer epoch commit or abort them: a
  read_committed consumer sees committed records only, with `transaction.version=2`
  finalized. WriteTxnMarkers v2 with TransactionVersion 1 behaves the same as v1, so v2 is not
  needed.
- Produce v12 and later means transaction version 2: the broker adds the partition to the
  transaction through its own coordinator, verification setting or not, and refuses our
  transactional batches. Our producers must speak Produce v11 or older.
- A WriteTxnMarkers v2 marker with TransactionVersion 2 needs a producer epoch above the
  batches' (KIP-890's epoch bump at each transaction's end), else INVALID_PRODUCER_EPOCH;
  we never send those.
"""

from __future__ import annotations

from coordinator_server.markers.check import (
    VERIFICATION_SETTING,
    KafkaTransactionsCheckError,
    KafkaTransactionsCheckUnanswered,
    check_kafka_for_transactions,
)
from coordinator_server.markers.writer import (
    KafkaTxnMarkerWriter,
    MarkerOutcome,
    MarkerWriterStopped,
    ProducerIdRefused,
)

__all__ = [
    "VERIFICATION_SETTING",
    "KafkaTransactionsCheckError",
    "KafkaTransactionsCheckUnanswered",
    "KafkaTxnMarkerWriter",
    "MarkerOutcome",
    "MarkerWriterStopped",
    "ProducerIdRefused",
    "check_kafka_for_transactions",
]
