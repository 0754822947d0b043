"""The real-time sink's replay records as a savepoint reads them from a checkpoint
(``headrace.savepoints.replay.read_replay``), in the files' format that the JVM sink
(``ExactlyOnceKafkaWriter``) writes, and as a manifest carries them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.savepoints import FORMAT_VERSION, Manifest, SavepointError
from headrace.savepoints.manifest import SinkReplay
from headrace.savepoints.replay import SINK_DIR, read_replay, write_ids


def _record(folder: Path, name: str, offsets: dict[tuple[str, int], int],
            ids: tuple[str, ...] = ()) -> None:
    lines = [f"offset\t{t}\t{p}\t{o}\n" for (t, p), o in offsets.items()]
    (folder / name).write_text("".join(lines) + "".join(f"id\t{i}\n" for i in ids))


@pytest.fixture
def sink(tmp_path: Path) -> Path:
    """Batch 4 committed, two tasks: epoch 4's records (and its .rest), the crc files and
    the -1 records of a start from a savepoint, which are no task of any epoch."""
    folder = tmp_path / SINK_DIR
    folder.mkdir()
    for task in (0, 1):
        _record(folder, f"4-{task}", {("alerts", 0): 10 + task, ("dlq", 0): 3})
        (folder / f"4-{task}.rest").write_text("id\tx7\n" if task else "")
        (folder / f".4-{task}.crc").write_bytes(b"crc")
    (folder / "-1-0.rest").write_text("id\told\n")
    return tmp_path


def test_the_epoch_after_the_batch_gives_where_the_output_after_it_begins(sink: Path) -> None:
    _record(sink / SINK_DIR, "5-0", {("alerts", 0): 25, ("dlq", 0): 4})
    _record(sink / SINK_DIR, "5-1", {("alerts", 0): 21, ("dlq", 0): 5}, ids=("x7",))
    found = read_replay(sink, 4)
    assert found is not None
    replay, carried = found
    assert replay == SinkReplay(epoch=5, tasks=2, offsets={"alerts": {"0": 21}, "dlq": {"0": 4}},
                                ids={"1": "realtime-sink/1.ids"}, id_count=1)
    assert carried == {1: ["x7"]}


def test_an_epoch_not_yet_opened_by_every_task_falls_back_to_the_batchs_own(sink: Path
                                                                            ) -> None:
    _record(sink / SINK_DIR, "5-0", {("alerts", 0): 25, ("dlq", 0): 4})
    found = read_replay(sink, 4)
    assert found is not None
    replay, carried = found
    assert (replay.epoch, replay.offsets, carried) == \
        (4, {"alerts": {"0": 10}, "dlq": {"0": 3}}, {})


def test_records_gone_are_refused_and_no_sink_is_none(sink: Path, tmp_path: Path) -> None:
    with pytest.raises(SavepointError, match="records of batch 2 are no longer"):
        read_replay(sink, 2)
    assert read_replay(tmp_path / "elsewhere", 4) is None


def test_the_manifest_carries_them_and_reads_format_1_without(sink: Path) -> None:
    _record(sink / SINK_DIR, "5-0", {("alerts", 0): 25}, ids=("a", "b"))
    _record(sink / SINK_DIR, "5-1", {("alerts", 0): 21})
    found = read_replay(sink, 4)
    assert found is not None
    write_ids(sink / "sp", *found)
    assert (sink / "sp" / "realtime-sink" / "0.ids").read_text() == "a\nb\n"
    manifest = Manifest(format_version=FORMAT_VERSION, created_at="", checkpoint="",
                        query_id="q", batch_id=4, shuffle_partitions=2, watermark_ms=0,
                        sources=(), operators=(), realtime_sink=found[0])
    assert Manifest.from_json(manifest.to_json()) == manifest
    old = json.loads(manifest.to_json())
    del old["realtime_sink"]
    old["format_version"] = 1
    assert Manifest.from_json(json.dumps(old)).realtime_sink is None
    old["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(SavepointError, match="format version 3"):
        Manifest.from_json(json.dumps(old))
