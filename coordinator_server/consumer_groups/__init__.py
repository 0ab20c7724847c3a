"""Kafka's consumer group protocol (KIP-848): groups whose members reconcile, one heartbeat at
a time, toward an assignment the coordinator computes. Pure state machines, as the classic
protocol's in `groups/`: the server-side assignors (`assignors/`: Kafka's uniform and range),
a member's reconciliation toward its target (`current_assignment`), the group's state.
Nothing here touches asyncio, sockets or a clock of its own."""
