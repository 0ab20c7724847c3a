"""Analytics and audit of the coordinator's log on Spark (the `pipeline` extra).

- `decode`: the log's records as typed rows (the schema executors fill).
- `logs`: where the log is stored, and reading the SQLite file.
- `kafka_source`: a log in a Kafka topic, read through Spark's own Kafka source.
- `source`: the Spark data source `coordinator_log` over the SQLite log, batch and streaming.
- `session`: the Spark session, and the log as a DataFrame (whichever the store).
- `state`: the final state the log leaves (compaction semantics).
- `transactional`: transactional offsets replayed with Kafka's rule at each end of a
  transaction.
- `audit`, `history`, `report`, `bench`: the `coordinator-server analyze` commands, whose
  command line is `cli` (and `main`, the same as a file for `spark-submit`).
  The audit's live side is `audit_live`, its transactional part `audit_transactions`.

Only `cli` is imported by the `coordinator-server` command itself; it imports PySpark when
an `analyze` command runs, so the server never needs it.
"""
