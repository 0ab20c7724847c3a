"""The RPC client: what talks over the network for the client library and the tools.

- `CoordinatorClient` (`client`): every API of the wire contract, pipelined on one
  `Connection` (`connection`) per server, with coordinator discovery, retries after an
  `ExponentialBackoff` (`backoff`) and typed errors (`errors`). Every API takes one
  request path (`request_path`, which the client builds on); what differs between APIs is
  its `ApiHandler` (`apis`). The servers it
  connects to are `nodes`; the helpers' requests from Kafka's structures, `requests`.
- `ClientSecurity` (`security`): Kafka's client security settings, from Kafka's property
  names, which every connection follows: TLS, and the SASL exchange (`sasl`: PLAIN, SCRAM,
  OAUTHBEARER) before its first request and again before its session's lifetime passes.
- `KafkaLogReader` (`kafka_log`): the offsets of a Kafka cluster's own partitions (ends,
  starts, offsets by time), which a consumer's lag and an offset reset need beside the
  coordinator's committed ones.

It depends on `coordinator_protocol` and aiokafka only: the client library
(`coordinator_client`), the server's admin tool and its pipeline build on it, and none of
them on each other.
"""
