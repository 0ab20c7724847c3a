"""The front door: every request of the wire contract passes here on its way to the shards.

`group_service` (Kafka's GroupCoordinatorService) and `transaction_service` (its
TransactionCoordinator as KafkaApis reaches it) route each request to the log partition of
its group or transactional id and turn the runtime's outcome into Kafka's answer;
`bulk_requests` answers the APIs that name many groups and `offset_fetch` OffsetFetch's,
`slicing` answers large requests in slices, `limits` checks what needs no state, `errors`
maps failures to Kafka's codes.
"""
