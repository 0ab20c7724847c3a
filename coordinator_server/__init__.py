"""A standalone group coordinator for Apache Kafka."""

__version__ = "0.1.0"
