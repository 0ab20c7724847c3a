"""Who a connection is: the server side of each SASL mechanism (`plain`, `scram`,
`oauthbearer`, behind `sasl_server.SaslServer`) and the principal of a TLS client certificate
(`ssl_principal_mapper`). Pure (no sockets, no asyncio, no clock of its own) but for the two
reads of a file at start: PLAIN's users file and OAUTHBEARER's JWKS."""
