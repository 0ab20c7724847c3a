"""The transaction coordinator's pure state machine (Kafka's TransactionCoordinator)."""
