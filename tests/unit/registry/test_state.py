"""The fold of ``_schemas``: compaction never changes what the registry knows (the failure
other registries have: ids reset after the record with the largest id is compacted away),
and no bytes in the topic crash it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.registry.state import (
    Record,
    SchemaVersion,
    State,
    config_record,
    id_high_water_record,
    mode_record,
    schema_record,
    schema_tombstone,
)

SUBJECTS = st.sampled_from(["a", "b", "c"])


@st.composite
def service_logs(draw: st.DrawFn) -> list[Record]:
    """Records in the order the registry's service writes them: a new id always comes with
    its ID_HIGH_WATER record; deletes are soft (deleted=true) or tombstones."""
    log: list[Record] = []
    next_id = 1
    versions: dict[str, int] = {}
    for _ in range(draw(st.integers(0, 40))):
        action = draw(st.sampled_from(["register", "reuse", "soft", "hard", "config", "mode"]))
        subject = draw(SUBJECTS)
        if action in ("register", "reuse"):
            version = versions.get(subject, 0) + 1
            versions[subject] = version
            if action == "register" or next_id == 1:
                schema_id, next_id = next_id, next_id + 1
            else:
                schema_id = draw(st.integers(1, next_id - 1))
            log.append(schema_record(SchemaVersion(subject, version, schema_id, f"s{schema_id}",
                                                   "AVRO")))
            if schema_id == next_id - 1:
                log.append(id_high_water_record(schema_id))
        elif action == "soft" and subject in versions:
            log.append(schema_record(SchemaVersion(subject, versions[subject], 0, "x", "AVRO",
                                                   deleted=True)))
        elif action == "hard" and subject in versions:
            log.append(schema_tombstone(subject, draw(st.integers(1, versions[subject]))))
        elif action == "config":
            log.append(config_record(draw(st.one_of(st.none(), SUBJECTS)),
                                     draw(st.sampled_from([None, "FULL", "NONE"]))))
        else:
            log.append(mode_record(draw(st.one_of(st.none(), SUBJECTS)),
                                   draw(st.sampled_from([None, "READONLY", "IMPORT"]))))
    return log


def fold(log: list[Record]) -> State:
    state = State()
    for offset, (key, value) in enumerate(log):
        state.apply(offset, key, value)
    return state


def compact(log: list[Record], drop_tombstones: bool) -> list[Record]:
    """Kafka's log compaction: the last record of each key, in offset order; tombstones
    gone too once delete.retention.ms passed."""
    last = {key: i for i, (key, _) in enumerate(log)}
    return [(k, v) for i, (k, v) in enumerate(log)
            if last[k] == i and not (drop_tombstones and v is None)]


@settings(max_examples=300)
@given(service_logs(), st.booleans())
def test_a_compacted_log_folds_to_the_same_registry(log: list[Record], drop: bool) -> None:
    full, compacted = fold(log), fold(compact(log, drop))
    assert compacted.subjects == full.subjects
    assert compacted.holders == full.holders
    assert compacted.configs == full.configs
    assert compacted.modes == full.modes
    assert compacted.id_high_water == full.id_high_water  # ids never go backwards


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                          st.one_of(st.none(), st.binary(max_size=40)))))
def test_arbitrary_records_never_crash_the_fold(records: list[tuple[bytes | None,
                                                                   bytes | None]]) -> None:
    state = fold([(k or b"", v) for k, v in records])
    assert state.next_offset == len(records)


def test_foreign_and_malformed_records_are_skipped() -> None:
    state = fold([(b"not json", b"{}"), (b'{"keytype": "SCHEMA"}', b'{"id": "x"}'),
                  (b'{"keytype": "NOOP", "magic": 0}', None)])
    assert state.subjects == {} and state.skipped == 2
