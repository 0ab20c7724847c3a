"""Who a connection is: the principal its authentication establishes. So far, the principal
of a TLS client certificate (`ssl_principal_mapper`). Pure: no I/O, no clock."""
