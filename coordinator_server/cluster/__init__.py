"""The coordinator cluster: which node owns which log partition, and keeping it so."""
