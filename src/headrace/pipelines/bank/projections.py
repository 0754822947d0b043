"""The bank's read models on Spark: account balances and a per-day summary.

Both are streaming aggregations over the event log (``headrace.eventsourcing.projection``),
written in update mode to compacted topics: ``<prefix>.balances`` keyed by account id, and
``<prefix>.daily`` keyed by day (``YYYY-MM-DD``, UTC, by the time each event was recorded).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def _amount() -> Column:
    return F.get_json_object("data", "$.amount").cast("long")


def balances(events: DataFrame) -> DataFrame:
    """``key`` = account id, ``value`` = JSON {account, owner, balance, version, updated_at}."""
    delta = (F.when(F.col("event_type") == "MoneyDeposited", _amount())
             .when(F.col("event_type") == "MoneyWithdrawn", -_amount()).otherwise(F.lit(0)))
    owner = F.when(F.col("event_type") == "AccountOpened", F.get_json_object("data", "$.owner"))
    agg = (events.where(F.col("aggregate_type") == "Account").groupBy("aggregate_id")
           .agg(F.sum(delta).alias("balance"), F.max("version").alias("version"),
                F.max(owner).alias("owner"), F.max("recorded_at").alias("updated_at")))
    return agg.select(F.col("aggregate_id").alias("key"), F.to_json(F.struct(
        F.col("aggregate_id").alias("account"), "owner", "balance", "version",
        F.date_format("updated_at", "yyyy-MM-dd'T'HH:mm:ss.SSSX").alias("updated_at")))
        .alias("value"))


def daily_summary(events: DataFrame) -> DataFrame:
    """``key`` = day, ``value`` = JSON {day, opened, deposits, deposited, withdrawals,
    withdrawn} (counts, and sums in cents)."""
    kind = F.col("event_type")
    counted = (events.where(F.col("aggregate_type") == "Account")
               .withColumn("day", F.date_format("recorded_at", "yyyy-MM-dd")))
    agg = counted.groupBy("day").agg(
        F.count(F.when(kind == "AccountOpened", 1)).alias("opened"),
        F.count(F.when(kind == "MoneyDeposited", 1)).alias("deposits"),
        F.coalesce(F.sum(F.when(kind == "MoneyDeposited", _amount())), F.lit(0)).alias("deposited"),
        F.count(F.when(kind == "MoneyWithdrawn", 1)).alias("withdrawals"),
        F.coalesce(F.sum(F.when(kind == "MoneyWithdrawn", _amount())), F.lit(0)).alias("withdrawn"))
    return agg.select(F.col("day").alias("key"), F.to_json(F.struct(
        "day", "opened", "deposits", "deposited", "withdrawals", "withdrawn")).alias("value"))
