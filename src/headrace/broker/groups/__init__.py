"""The group coordinator (classic protocol) and the committed-offset store."""
