"""Analytics and audit of the coordinator's log on Spark (the `pipeline` extra).

- `decode`: the log's records as typed rows (the schema executors fill).
- `logs`: reading the log where it is stored (a Kafka topic, the SQLite file).
- `source`: the Spark data source `coordinator_log`, batch and streaming.
- `session`: the Spark session, and the log as a DataFrame.
- `state`: the final state the log leaves (compaction semantics).
- `audit`, `history`, `report`, `bench`: the `coordinator-server analyze` commands, whose
  command line is `cli` (and `main`, the same as a file for `spark-submit`).

Only `cli` is imported by the `coordinator-server` command itself; it imports PySpark when
an `analyze` command runs, so the server never needs it.
"""
