"""Applying a ``RuleSet`` to a streaming DataFrame: Spark SQL for the predicates, then the
JVM rule operator (Java transformWithState), so the whole plan can run in Real-Time Mode.

``apply_rules`` needs the operator's jar in the session (``make setup`` builds
``jvm/lib/realtime``; ``headrace.spark.session.local_session`` adds it). Its output has one
row per row that fired (and one per ``passthrough`` row, with no reasons): ``key``, ``id``, ``event_time_ms``, ``reasons`` (rule names, in rule
order), ``score``, then the rule set's ``carry`` columns. ``python_operators`` lists the
Python operators of a plan (there must be none for Real-Time Mode).
"""

from __future__ import annotations

import json
import re
import weakref
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import IllegalArgumentException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from headrace.realtime.errors import NotRealTimeError, RealtimeError, RuleError
from headrace.realtime.rules import RuleSet, compile_spec, flag_column, predicate
from headrace.savepoints import Savepoint, migrations

KIND = "__kind"
TIME = "__t"
OPERATOR_CLASS = "io.headrace.realtime.Rules"
OPERATOR_NAME = "realtime.rules"
STATE_VERSION = 2
"""The rule operator's state schema version (``io.headrace.realtime.KeyState``: 2 names its
layout in a header, so a changed rule set reads it by name)."""
STATE_COLUMN = "__state"
"""The initial state's column of a savepoint's stored values (``RuleSpec.STATE_COLUMN``)."""


@migrations.register(OPERATOR_NAME, from_version=1)
def _v1_to_v2(keys: Any, timer: int | None) -> tuple[Any, int | None]:
    # the JVM operator reads version 1 itself (with the rule set's own layout, as before
    # headers); nothing for Python to change
    return keys, timer


# What a savepoint's per-key state needs unchanged, and why (``apply_rules(from_savepoint=)``).
_FIXED = {"key": "the state is per key; a savepoint cannot re-key it"}
_PYTHON_NODE = re.compile(r"Python|Pandas|PySpark|Arrow")
_CLASS = re.compile(r'"class":"([\w.$]+)"')


def has_rule_operator(spark: SparkSession) -> bool:
    """True when the JVM rule operator's class loads in ``spark`` (cheap, starts nothing)."""
    jvm_view = spark.sparkContext._jvm
    if jvm_view is None:
        return False
    try:
        loader = jvm_view.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        loader.loadClass(OPERATOR_CLASS)
    except Py4JError:
        return False
    return True


def apply_rules(rows: DataFrame, rules: RuleSet, initial_profiles: DataFrame | None = None,
                from_savepoint: Savepoint | str | Path | None = None) -> DataFrame:
    """``rows`` through ``rules``: a streaming (or batch) DataFrame of alerts.

    ``rows`` holds events and, if ``rules.profile`` is set, profile rows (told apart by
    ``rules.profile.when``). ``initial_profiles``, a batch DataFrame with one row per key
    (the key, ``rules.profile.time`` and ``rules.profile.fields`` columns), is loaded into
    the keys' state before the first row when the query starts without a checkpoint: the way
    to have a whole profile table in place before events flow. ``from_savepoint``: start
    (with a fresh checkpoint) from the rule operator's per-key state in a savepoint
    (``headrace.savepoints``), loaded as initial state like the profiles: the keys' recent
    events, rule firings and profiles, so rules count history from before the savepoint. The
    rule set may differ from the one that wrote it (thresholds, weights, cool-downs, rules
    added or removed): stored fields are matched by name; a new rule's ``where``/``when``
    reads false, a new field NaN, on events from before. The key column may not change
    (``IncompatibleStateError``, before anything runs). Raises ``RuleError`` naming a
    missing column or a bad rule, ``RealtimeError`` when the operator's jar is not in the
    session.
    """
    spark = rows.sparkSession
    if not has_rule_operator(spark):
        raise RealtimeError(
            f"{OPERATOR_CLASS} is not on this session's classpath: run `make setup` (it "
            "builds jvm/lib/realtime) and start the session with "
            "headrace.spark.session.local_session")
    spec = compile_spec(rules, kind=KIND, time=TIME)
    columns = set(rows.columns)
    needed = {rules.key, rules.id, rules.event_time, *rules.carry, *json.loads(spec)["fields"]}
    if rules.profile is not None:
        needed |= {rules.profile.time, *rules.profile.fields}
    missing = sorted(needed - columns)
    if missing:
        raise RuleError(f"columns {missing} are not in the input ({sorted(columns)})")
    event_ms = _epoch_ms(rows, rules.event_time)
    if rules.profile is not None:
        is_profile = F.coalesce(predicate(rules.profile.when), F.lit(False))
        kind = F.when(is_profile, F.lit("profile")).otherwise(F.lit("event"))
        t = F.when(is_profile, _epoch_ms(rows, rules.profile.time)).otherwise(event_ms)
    else:
        kind, t = F.lit("event"), event_ms
    if rules.passthrough is not None:
        passing = F.coalesce(predicate(rules.passthrough), F.lit(False))
        kind = F.when(passing, F.lit("pass")).otherwise(kind)
        t = F.when(passing, F.coalesce(t, F.lit(0))).otherwise(t)
    prepared = rows.withColumn(KIND, kind).withColumn(TIME, t.cast("long"))
    for r in rules.rules:
        for which in ("where", "when"):
            p = getattr(r, which, None)
            if p is not None:
                prepared = prepared.withColumn(flag_column(r.name, which),
                                               F.coalesce(predicate(p), F.lit(False)))
    keep = [c for c in prepared.columns
            if c in needed or c in (KIND, TIME) or c.startswith(("__where_", "__when_"))]
    prepared = prepared.select(*keep).where(
        F.col(rules.key).isNotNull() & F.col(TIME).isNotNull()
        & (F.col(rules.id).isNotNull() | (F.col(KIND) == "profile")))
    initial = None
    if initial_profiles is not None:
        if rules.profile is None:
            raise RuleError("initial_profiles needs RuleSet(profile=...)")
        wanted = [rules.key, rules.profile.time, *rules.profile.fields]
        absent = sorted(set(wanted) - set(initial_profiles.columns))
        if absent:
            raise RuleError(f"initial_profiles lacks columns {absent}")
        initial = initial_profiles.select(
            rules.key, _epoch_ms(initial_profiles, rules.profile.time).alias(rules.profile.time),
            *rules.profile.fields)
    if from_savepoint is not None:
        saved = saved_state(spark, Savepoint.of(from_savepoint), rules)
        if saved is not None:
            initial = saved if initial is None else \
                initial.unionByName(saved, allowMissingColumns=True)
    jvm_view = spark.sparkContext._jvm
    assert jvm_view is not None
    try:
        jdf = jvm_view.io.headrace.realtime.Rules.apply(
            prepared._jdf, spec, None if initial is None else initial._jdf)
    except (Py4JJavaError, IllegalArgumentException) as e:
        raise RuleError(f"the rule operator refused the rule set: {e}") from e
    return DataFrame(jdf, spark)


def saved_state(spark: SparkSession, savepoint: Savepoint, rules: RuleSet
                ) -> DataFrame | None:
    """The rule operator's per-key state in ``savepoint`` as initial-state rows (``rules.key``,
    ``STATE_COLUMN``), None when it held no key. Raises ``IncompatibleStateError`` when the
    savepoint has no rule operator's state or its key column differs from ``rules.key``."""
    op, _ = savepoint.check(operator=OPERATOR_NAME, family=(), version=STATE_VERSION,
                            params={"key": rules.key}, fixed=_FIXED)
    if not op.keys or not op.variables:
        return None
    state = savepoint.state(spark, op.operator_id)
    return state.select(F.col("key").alias(rules.key), F.col(STATE_COLUMN))


def _epoch_ms(rows: DataFrame, name: str) -> Column:
    dtype = rows.schema[name].dataType
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return F.unix_millis(F.col(name).cast("timestamp"))
    return F.col(name).cast("long")


def python_operators(df: DataFrame) -> list[str]:
    """Names of the Python operators in ``df``'s analyzed plan (UDFs, pandas/Arrow maps,
    Python transformWithState, Python data sources); empty when Real-Time Mode can run it."""
    # The plan's JSON names the class of every node and expression (a Python UDF is only a
    # lambda's name in the plan's text form, and streaming plans cannot be optimized here).
    tree = str(df._jdf.queryExecution().analyzed().toJSON())
    classes = {c.rsplit(".", 1)[-1] for c in _CLASS.findall(tree)}
    return sorted(c for c in classes if _PYTHON_NODE.search(c))


def require_real_time(df: DataFrame) -> None:
    """``NotRealTimeError`` naming the Python operators on ``df``'s plan, if any."""
    found = python_operators(df)
    if found:
        raise NotRealTimeError(
            f"Real-Time Mode runs JVM operators only; this plan has {', '.join(found)}")


def local_counters(spark: SparkSession) -> tuple[int, int, int]:
    """(profile rows, event rows, alerts) the rule operator handled in this JVM since it
    started: the whole query's in local mode (one JVM), zero on a cluster's driver. Cheap;
    (0, 0, 0) without the operator's jar."""
    rules = _rules_class(spark)
    if rules is None:
        return (0, 0, 0)
    profiles, events, alerts = rules.counters()
    return (int(profiles), int(events), int(alerts))


_RULES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Each SparkContext's ``OPERATOR_CLASS`` (py4j's JavaClass), None where it is not on the
classpath: py4j resolves a dotted name one prefix at a time (``io``, ``io.headrace``, ...)
and each prefix that is no class costs a lookup through every jar on Spark's classpath,
3.75 ms of the driver JVM's CPU a call (0.45 ms with the class held), which a caller polling
the counters (the demo, ten times a second while profiles load) paid every time."""


def _rules_class(spark: SparkSession) -> Any:
    sc = spark.sparkContext
    if sc not in _RULES:
        jvm_view = sc._jvm
        _RULES[sc] = (jvm_view.io.headrace.realtime.Rules
                      if jvm_view is not None and has_rule_operator(spark) else None)
    return _RULES[sc]
