"""The tools `coordinator-server` runs besides the server, each reaching a server over the
wire like any client and never through its request path:

- `admin`: `groups` and `transactions`, Kafka's `kafka-consumer-groups` and
  `kafka-transactions`;
- `bench`: the server side by side with Kafka's own coordinator and with tansu;
- `pipeline`: `analyze`, Spark over the log;
- `kafka_options`: the Kafka connection options they share.
"""
