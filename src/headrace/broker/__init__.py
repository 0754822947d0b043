"""The asyncio Kafka-protocol server: framing, one handler module per API key."""
