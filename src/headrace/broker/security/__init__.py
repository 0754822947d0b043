"""Authentication: SASL mechanisms (PLAIN, SCRAM-SHA-256/512) and the SCRAM credentials."""
