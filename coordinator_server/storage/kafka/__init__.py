"""The Kafka log, and the Kafka client it is made of: most of `storage/`.

`log.py` is the log behind the runtime's interfaces (`KafkaLog`). The rest is a client of
Kafka's brokers, which the markers and the tools use too:
- the produce path: `produce.py`, `produce_request.py`, `idempotence.py`;
- taking a partition over from another producer: `producer_fencing.py`;
- reading: `load.py`, and `follow.py` for standbys;
- the cluster's metadata: `metadata.py` and `topic.py`, with requests that never create a
  topic;
- connecting: `security.py` (TLS and SASL settings) and `sasl.py` (the exchange);
- the data cluster's own ACLs, for `--authorizer kafka`: `acl_source.py`.
"""
