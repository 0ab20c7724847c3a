"""Authorization with Kafka's semantics: ACLs (`acls`) and the decision Kafka's
StandardAuthorizer makes over them (`standard`). Pure: no I/O, no clock."""
