"""User profiles in a PostgreSQL table, brought into the log by change data capture.

Seed 003's "local table copy": the profiles live in the database of record (``users``);
``headrace cdc`` streams the table's changes as Debezium events into
``<prefix>.public.users``, and the pipelines join transactions against that changelog (the
``after`` state of each event). A profile changed in the database while the demo runs
changes the decisions that follow.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg2

from headrace.pipelines.fraud.stream import GeneratedEvent

TABLE = "public.users"
_DDL = ("CREATE TABLE IF NOT EXISTS users (user_id text PRIMARY KEY, home_city text, "
        "home_lat double precision, home_lon double precision, avg_amount double precision, "
        "std_amount double precision, card_ids text[], updated_at bigint NOT NULL)")
_UPSERT = ("INSERT INTO users VALUES (%(user_id)s, %(home_city)s, %(home_lat)s, %(home_lon)s, "
           "%(avg_amount)s, %(std_amount)s, %(card_ids)s, %(updated_at)s) ON CONFLICT (user_id) "
           "DO UPDATE SET home_city = EXCLUDED.home_city, home_lat = EXCLUDED.home_lat, "
           "home_lon = EXCLUDED.home_lon, avg_amount = EXCLUDED.avg_amount, "
           "std_amount = EXCLUDED.std_amount, card_ids = EXCLUDED.card_ids, "
           "updated_at = EXCLUDED.updated_at")


class ProfileTable:
    """The ``users`` table at ``dsn`` (created if missing). Not thread-safe: one writer."""

    def __init__(self, dsn: str) -> None:
        self.conn: Any = psycopg2.connect(dsn)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(_DDL)

    def write(self, events: list[GeneratedEvent]) -> None:
        """Upsert the profiles of ``events`` (generator profile records), one transaction."""
        with self.conn, self.conn.cursor() as cur:
            cur.executemany(_UPSERT, [json.loads(e.value) for e in events])

    def close(self) -> None:
        self.conn.close()
