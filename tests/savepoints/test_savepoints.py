"""Savepoints of the windowed operator: written from a checkpoint, started from with a
different number of shuffle partitions (2 -> 5 -> 3), through a state schema migration,
output exactly once through the headrace sink and equal to an unrescaled run's; and the
refusals, before anything runs, of what cannot carry over.

One module-scoped scenario runs the queries (five short availableNow runs: the reference's
three, the rescaled chain's two after the reference's first step); the tests check what
it produced.
"""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from headrace.pipelines.fraud.realtime import RealtimeConfig, fraud_rules
from headrace.pipelines.fraud.realtime import start as start_realtime
from headrace.pipelines.fraud.rules import Thresholds
from headrace.realtime import RuleSet, WindowCount, WindowSum, apply_rules
from headrace.savepoints import (
    FORMAT_VERSION,
    IncompatibleStateError,
    Manifest,
    Savepoint,
    SavepointError,
    create,
    migrations,
)
from headrace.savepoints.manifest import MANIFEST
from headrace.spark import read_events
from headrace.streaming import count, sum_of, to_topics, tumbling, windowed
from headrace.testing import EmbeddedBroker, scaled
from tests.savepoints.corpus_cases import CORPUS
from tests.spark.kafka_helpers import create_topic, produce, read_all
from tests.streaming.harness import MINUTE, T0

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

SCHEMA = "k string, ts long, amount double"
KEYS = [f"k{i}" for i in range(7)]
SPEC: dict[str, Any] = {"keys": ["k"], "event_time": "event_time",
                        "window": tumbling("10 minutes"),
                        "aggs": [count(), sum_of("amount")], "watermark": "1 minute",
                        "allowed_lateness": "2 minutes", "buckets": 8}


def chunk(start: float, end: float, step: float, late: list[float] = ()) -> list[dict[str, Any]]:
    """Events every ``step`` minutes for each key, then ``late`` ones (minutes)."""
    out = []
    t = start
    while t < end:
        for i, k in enumerate(KEYS):
            out.append({"k": k, "ts": T0 + round((t + i / 10) * MINUTE), "amount": i + t})
        t += step
    out += [{"k": "k1", "ts": T0 + round(m * MINUTE), "amount": 0.5} for m in late]
    return out


# Three steps; the second and third carry events behind the watermark (late, and within
# the allowed lateness), so the watermark carried by the savepoint decides what they do.
STEPS = [chunk(0, 14, 1.5), chunk(13, 31, 2, late=[8, 11.5]), chunk(29, 52, 2.5, late=[2, 27])]


# A test-only older layout of windowed.columnar's state (schema "version 0"): the flag
# column is called "done". The migration below is what a real layout change would ship.
def _to_v0(value: bytes) -> bytes:
    keys, timer = pickle.loads(value)[:2]
    keys = {("done" if c == "emitted" else c): v for c, v in keys.items()}
    return pickle.dumps((keys, timer))


def _from_v0(keys: Any, timer: int | None) -> tuple[Any, int | None]:
    return {("emitted" if c == "done" else c): v for c, v in keys.items()}, timer


def downgrade(src: Path, dst: Path) -> None:
    """Copy savepoint ``src`` to ``dst`` with its windows in the version-0 layout."""
    shutil.copytree(src, dst)
    manifest = Manifest.from_json((dst / MANIFEST).read_text())
    op = manifest.operators[0]
    for var in op.variables:
        path = next((dst / var.file).glob("part-*.parquet"))
        table = pq.read_table(path)
        values = [_to_v0(v) for v in table.column("keys").to_pylist()]
        table = table.set_column(table.column_names.index("keys"), "keys",
                                 pa.array(values, pa.binary()))
        pq.write_table(table, path)
    old = replace(manifest, operators=(replace(op, schema_version=0),))
    (dst / MANIFEST).write_text(old.to_json())
    for crc in dst.rglob("*.crc"):  # savepoints written before checksums were dropped
        crc.unlink()


@dataclass
class Scenario:
    reference: list[dict[str, Any]]
    rescaled: list[dict[str, Any]]
    savepoints: list[Path]
    manifests: list[Manifest]
    late_reference: list[str]
    late_rescaled: list[str]


def _outputs(bootstrap: str, topic: str) -> list[Any]:
    return [m.value().decode() for m in read_all(bootstrap, topic)]


@pytest.fixture(scope="module")
def scenario(spark: SparkSession, broker: EmbeddedBroker,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    tmp = tmp_path_factory.mktemp("savepoints")
    bootstrap = broker.bootstrap_servers
    topic = f"sp-events-{tmp.name}"
    create_topic(bootstrap, topic, 2)
    outs = {name: (f"{topic}-{name}", f"{topic}-{name}-late") for name in ("ref", "resc")}

    def run(name: str, checkpoint: Path, partitions: int,
            origin: Savepoint | None = None) -> None:
        source = read_events(spark, topic, SCHEMA, event_time="ts",
                             dead_letter_topic=topic + "-dlq",
                             kafka_bootstrap_servers=bootstrap, startingOffsets="earliest",
                             from_savepoint=origin)
        out: DataFrame = windowed(source, **SPEC, from_savepoint=origin)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        q = (to_topics(out, ["k"], *outs[name]).writeStream.format("headrace")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(scaled(180)), "the step's query did not finish"
        assert q.exception() is None, q.exception()

    before = spark.conf.get("spark.sql.shuffle.partitions")
    migrations.register("windowed.columnar", 0)(_from_v0)
    try:
        savepoints: list[Path] = []
        origin = None
        first: dict[str, list[str]] = {}
        for i, (events, partitions) in enumerate(zip(STEPS, (2, 5, 3), strict=True)):
            produce(bootstrap, topic, [(e["k"].encode(), json.dumps(e).encode())
                                       for e in events])
            run("ref", tmp / "reference", 2)
            # the first step at 2 partitions is the reference's own: its savepoint (of a
            # query that goes on running) starts the rescaled chain
            checkpoint = tmp / "reference"
            if i:
                checkpoint = tmp / f"rescaled-{i}"
                run("resc", checkpoint, partitions, origin)
            else:
                first = {out: _outputs(bootstrap, out) for out in outs["ref"]}
            if i < 2:
                sp = tmp / f"sp-{i}"
                create(spark, checkpoint, sp, bootstrap_servers=bootstrap)
                savepoints.append(sp)
                if i == 0:  # the second step starts from the older layout, migrated
                    downgrade(sp, tmp / "sp-0-v0")
                    sp = tmp / "sp-0-v0"
                origin = Savepoint(sp)
    finally:
        migrations.unregister("windowed.columnar", 0)
        spark.conf.set("spark.sql.shuffle.partitions", before)
    yield Scenario(
        reference=sorted(map(json.loads, _outputs(bootstrap, outs["ref"][0])),
                         key=json.dumps),
        rescaled=sorted(map(json.loads, first[outs["ref"][0]]
                            + _outputs(bootstrap, outs["resc"][0])), key=json.dumps),
        savepoints=savepoints,
        manifests=[Savepoint(p).manifest for p in savepoints],
        late_reference=sorted(_outputs(bootstrap, outs["ref"][1])),
        late_rescaled=sorted(first[outs["ref"][1]] + _outputs(bootstrap, outs["resc"][1])))


def test_rescaled_2_5_3_output_equals_an_unrescaled_run_exactly_once(
        scenario: Scenario) -> None:
    assert len(scenario.reference) >= 30
    assert scenario.rescaled == scenario.reference
    assert scenario.late_rescaled == scenario.late_reference
    assert len(scenario.late_reference) == 2  # minutes 8 and 2: past end + allowed lateness
    finals = [r for r in scenario.reference if r["final"]]
    assert len(finals) == len({(r["k"], r["window_start"]) for r in finals})


def test_manifest_records_the_committed_batch(scenario: Scenario) -> None:
    first, second = scenario.manifests
    assert first.format_version == FORMAT_VERSION == 2 and first.spark_version.startswith("4.")
    assert first.realtime_sink is None  # no real-time sink in this query
    assert [(o.operator_id, o.name, o.schema_version, o.partitions) for o in first.operators] \
        == [(0, "windowed.columnar", 1, 2)]
    assert (first.shuffle_partitions, second.shuffle_partitions) == (2, 5)
    assert second.operators[0].partitions == 5
    op = first.operators[0]
    assert op.params["window"] == ["tumbling", 600_000, 0] and op.params["buckets"] == 8
    assert op.key_schema["fields"][0]["name"] == "__headrace_bucket"
    # offsets: every event of the first step, per partition
    (source,) = first.sources
    assert source is not None
    assert sum(sum(parts.values()) for parts in source.values()) == len(STEPS[0])
    # the watermark the next batch runs with: newest event time seen minus one minute
    newest = max(e["ts"] for e in STEPS[0])
    assert first.watermark_ms == newest - MINUTE
    assert op.keys == len(KEYS)
    # the exactly-once sink's markers: every sink task of the query is at batch + 1
    assert first.sink and set(first.sink.values()) == {first.batch_id + 1}


def test_inspect_shows_state_as_a_dataframe(spark: SparkSession, scenario: Scenario) -> None:
    sp = Savepoint(scenario.savepoints[0])
    rows = sp.state(spark, 0).collect()
    assert {r["__headrace_bucket"] for r in rows} <= set(range(8))
    assert sum(1 for _ in rows) == sp.manifest.operators[0].variables[0].rows


def test_a_changed_window_or_key_is_refused_naming_the_operator(
        spark: SparkSession, broker: EmbeddedBroker, scenario: Scenario) -> None:
    source = read_events(spark, "unused", SCHEMA, event_time="ts", dead_letter_topic="x",
                         kafka_bootstrap_servers=broker.bootstrap_servers)
    sp = Savepoint(scenario.savepoints[1])
    with pytest.raises(IncompatibleStateError,
                       match=r"operator 0 \(windowed.columnar\): window changed from "
                             r"\['tumbling', 600000, 0\] to \['tumbling', 300000, 0\]"):
        windowed(source, **{**SPEC, "window": tumbling("5 minutes")}, from_savepoint=sp)
    with pytest.raises(IncompatibleStateError,
                       match=r"operator 0 \(windowed.columnar\): keys changed"):
        windowed(source.withColumnRenamed("k", "j"), **{**SPEC, "keys": ["j"]},
                 from_savepoint=sp)
    with pytest.raises(IncompatibleStateError, match="buckets changed from 8 to 16"):
        windowed(source, **{**SPEC, "buckets": 16}, from_savepoint=sp)
    # compatible: another allowed lateness, emit and aggregate names
    windowed(source, **{**SPEC, "allowed_lateness": "5 minutes", "emit": "updates",
                        "aggs": [count("n"), sum_of("amount", "total")]}, from_savepoint=sp)


def test_an_older_schema_without_migration_is_refused(
        spark: SparkSession, broker: EmbeddedBroker, scenario: Scenario,
        tmp_path: Path) -> None:
    downgrade(scenario.savepoints[0], tmp_path / "old")
    source = read_events(spark, "unused", SCHEMA, event_time="ts", dead_letter_topic="x",
                         kafka_bootstrap_servers=broker.bootstrap_servers)
    with pytest.raises(IncompatibleStateError,
                       match=r"operator windowed\.columnar: no migration of its state "
                             r"from schema version 0 to 1"):
        windowed(source, **SPEC, from_savepoint=tmp_path / "old")


def test_create_refuses_an_existing_folder_and_a_non_checkpoint(
        spark: SparkSession, scenario: Scenario, tmp_path: Path) -> None:
    with pytest.raises(SavepointError, match="exists"):
        create(spark, scenario.manifests[0].checkpoint, scenario.savepoints[0])
    with pytest.raises(SavepointError, match="not a streaming checkpoint"):
        create(spark, tmp_path, tmp_path / "sp")
    with pytest.raises(SavepointError, match="not a savepoint"):
        Savepoint(tmp_path)


def _rule_rows(spark: SparkSession, txns: list[tuple[str, str, int, float]]) -> DataFrame:
    return spark.createDataFrame(
        [(card, txn_id, t, amount) for card, txn_id, t, amount in txns],
        "card_id string, txn_id string, event_time long, amount double")


def test_rule_operator_starts_from_a_savepoint_with_another_rule_set(
        spark: SparkSession) -> None:
    """The corpus's savepoint of the real-time rule operator (the fraud rules; card c0 made
    8 transactions of 20.0 in 140 s), read by a rule set of other rules: the new velocity
    rule counts the 8 saved transactions with the new one (9); the new rule's ``where``
    flag reads false on saved transactions, so the spend rule sums the new one only (20,
    not 180). A changed key is refused before anything runs."""
    sp = CORPUS / "realtime-rules" / "savepoint"
    rules = RuleSet(rules=(WindowCount("velocity9", window="5 minutes", hop="1 minute",
                                       at_least=9),
                           WindowSum("spend", window="5 minutes", of="amount", at_least=30,
                                     where="amount > 10")),
                    key="card_id", id="txn_id", event_time="event_time", state_ttl=0)
    rows = _rule_rows(spark, [("c0", "new", T0 + 160_000, 20.0),
                              ("c9", "other", T0 + 160_000, 20.0)])
    out = apply_rules(rows, rules, from_savepoint=sp).collect()
    assert [(r.key, r.id, list(r.reasons)) for r in out] == [("c0", "new", ["velocity9"])]
    with pytest.raises(IncompatibleStateError, match="key changed from 'card_id' to 'txn_id'"):
        apply_rules(rows, replace(rules, key="txn_id"), from_savepoint=sp)


def test_real_time_path_refuses_a_savepoint_with_a_checkpoint_not_fresh(
        spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "cp" / "commits").mkdir(parents=True)
    (tmp_path / "cp" / "commits" / "0").write_text("v1\n{}\n")
    cfg = RealtimeConfig("localhost:1", str(tmp_path / "cp"),
                         from_savepoint=str(CORPUS / "realtime-rules" / "savepoint"))
    with pytest.raises(IncompatibleStateError, match="has committed batches"):
        start_realtime(spark, cfg)


def test_rule_operator_reads_state_of_schema_version_1(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    """A savepoint whose rule-operator values have no header (schema version 1, as the
    operator wrote them before layouts were named) restores with the rule set's own layout:
    the same alerts as from the version-2 savepoint it was made of."""
    v2 = CORPUS / "realtime-rules" / "savepoint"
    v1 = tmp_path / "v1"
    shutil.copytree(v2, v1)
    for part in (v1 / "operators").rglob("*.parquet"):
        if part.is_file():
            table = pq.read_table(part)
            bare = [v[6 + int.from_bytes(v[4:6], "big"):]
                    for v in table.column("__state").to_pylist()]
            pq.write_table(table.set_column(table.schema.get_field_index("__state"),
                                            "__state", pa.array(bare, pa.binary())), part)
    raw = json.loads((v1 / MANIFEST).read_text())
    raw["operators"][0].update(name="", schema_version=1, params={})
    (v1 / MANIFEST).write_text(json.dumps(raw))
    rules = replace(fraud_rules(Thresholds(velocity_count=9, quiet_ms=1)), state_ttl=0)
    rows = spark.createDataFrame(
        [("c0", "new", "u0", 20.0, 48.85, 2.35, "Paris", T0 + 160_000, "transactions", 0,
          None, 25.0, 5.0)],
        "card_id string, txn_id string, user_id string, amount double, lat double, "
        "lon double, city string, event_time long, topic string, ingest_ms long, "
        "updated_at long, avg_amount double, std_amount double")
    alerts = [[(r.key, r.id, list(r.reasons)) for r in
               apply_rules(rows, rules, from_savepoint=sp).collect()] for sp in (v2, v1)]
    assert alerts[0] == alerts[1] == [("c0", "new", ["velocity"])]
