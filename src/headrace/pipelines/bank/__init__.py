"""Seed 003's bank account on the event store: the domain, its projections on Spark and
``headrace demo bank``."""
