"""The real-time path's exactly-once sink across a savepoint: what the old query committed
after the savepoint's batch is not written again by a query started from the savepoint.

The sink (``io.headrace.realtime.ExactlyOnceKafkaWriter``) keeps its replay records in
``<checkpoint>/exactly-once-sink`` (``SINK_DIR``), one file per (epoch = batch id, task):

- ``<epoch>-<task>``, in place before the epoch's first attempt of the task writes
  anything: lines ``offset\\t<topic>\\t<partition>\\t<end offset>`` (the output topics' end
  offsets then, or a little earlier) and ``id\\t<id>`` (ids to skip, carried from the epoch
  before). The previous epoch's task prepares it at its successful close as
  ``<epoch>-<task>.next`` (offsets captured during that epoch, the ids of its skip set it
  did not meet) and the first attempt renames it; without one, the first attempt writes it;
- ``<epoch>-<task>.rest``: a skip set the epoch after starts from when it finds no prepared
  record (``seed`` writes ``-1-<task>.rest``; older versions of the sink wrote one at every
  close).

Every record it writes carries headers ``headrace.id`` (the row's id: the fraud path's
transaction id, or a dead letter's coordinates) and ``headrace.task`` (the task).

``read_replay`` (at ``create``): as of committed batch N, where the output of the input after
N's offsets begins: the end offsets recorded when epoch N + 1 opened (N's when some task of
N + 1 has not opened yet: a lower bound still, since every output row of N + 1 lies after
them), and the ids carried into N + 1 (output of that input committed before those offsets
by an attempt that crashed). Nothing is read from a broker, so the query may run on:
whatever it writes later lies after those offsets too.

``seed`` (when a query starts from the savepoint, before it runs): reads the output topics
from those offsets to their end with read_committed, collects the ids each task of the old
query committed there, adds the carried ids, and writes them as the new checkpoint's
``-1-<task>.rest``: the skip set the sink's epoch 0 starts from (and carries on, epoch after
epoch, until the replay from the savepoint's offsets has met each id). With the same number
of tasks each task gets its own ids (Spark routes a key to the same task for the same
count); with another count every task gets them all (skipping an id never written is
harmless: one row per id).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from headrace.savepoints.errors import SavepointError
from headrace.savepoints.manifest import SinkReplay

SINK_DIR = "exactly-once-sink"
"""Where, under a real-time query's checkpoint, the exactly-once sink keeps its records."""
ID_HEADER, TASK_HEADER = "headrace.id", "headrace.task"
"""The headers the sink writes on every record (``ExactlyOnceKafkaWriter``)."""
IDS_DIR = "realtime-sink"
"""Where, in a savepoint, the carried ids are (``<task>.ids``, one id a line)."""

_RECORD = re.compile(r"^(-?\d+)-(\d+)(\.rest)?$")


def _records(folder: Path) -> dict[tuple[int, int, bool], Path]:
    """(epoch, task, is .rest) -> file, for the sink's records in ``folder``."""
    found = {}
    for path in folder.iterdir():
        m = _RECORD.match(path.name)
        if m:
            found[(int(m[1]), int(m[2]), m[3] is not None)] = path
    return found


def _parse(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    """An epoch record's offsets ({topic: {partition: offset}}) and ids."""
    offsets: dict[str, dict[str, int]] = {}
    ids = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise SavepointError(f"cannot read the sink's record {path}: {e.strerror}") from e
    for line in lines:
        kind, _, rest = line.partition("\t")
        if kind == "id":
            ids.append(rest)
        elif kind == "offset":
            topic, partition, offset = rest.split("\t")
            offsets.setdefault(topic, {})[partition] = int(offset)
    return offsets, ids


def read_replay(checkpoint: Path, batch_id: int) -> tuple[SinkReplay, dict[int, list[str]]] | None:
    """The sink's replay records of ``checkpoint`` as of committed batch ``batch_id`` and the
    carried ids per task; None when the query has no real-time exactly-once sink. Raises
    ``SavepointError`` when the records of that batch are gone (the sink keeps the last two
    epochs': a savepoint of a real-time query is taken of its last committed batch)."""
    folder = checkpoint / SINK_DIR
    if not folder.is_dir():
        return None
    records = _records(folder)
    tasks = {task for (epoch, task, _) in records if epoch >= 0}
    if not tasks:
        return None
    for epoch in (batch_id + 1, batch_id):
        opened = {task: records.get((epoch, task, False)) for task in tasks}
        if all(opened.values()):
            break
    else:
        raise SavepointError(
            f"the real-time sink's records of batch {batch_id} are no longer in {folder} "
            "(it keeps the last two epochs'): take the savepoint of the last committed batch")
    offsets: dict[str, dict[str, int]] = {}
    carried: dict[int, list[str]] = {}
    for task, path in sorted(opened.items()):
        assert path is not None
        found, ids = _parse(path)
        for topic, parts in found.items():
            low = offsets.setdefault(topic, {})
            for partition, offset in parts.items():
                low[partition] = min(offset, low.get(partition, offset))
        if ids:
            carried[task] = ids
    replay = SinkReplay(epoch=epoch, tasks=len(tasks), offsets=offsets,
                        ids={str(t): f"{IDS_DIR}/{t}.ids" for t in sorted(carried)},
                        id_count=sum(len(i) for i in carried.values()))
    return replay, carried


def write_ids(folder: Path, replay: SinkReplay, carried: dict[int, list[str]]) -> None:
    """The carried ids into a savepoint being written at ``folder`` (``replay.ids``' files)."""
    for task, ids in carried.items():
        path = folder / replay.ids[str(task)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{i}\n" for i in ids))


def committed_ids(bootstrap_servers: str, offsets: dict[str, dict[str, int]],
                  client_configs: dict[str, str] | None = None, timeout: float = 60.0
                  ) -> dict[int, set[str]]:
    """Per task of the sink, the ids of the records it committed in the output topics
    since ``offsets`` (read_committed, up to the end offsets when called; a partition the
    topic gained since starts at 0). Blocks until the transactions still open at those ends
    are decided (an old task's, aborted by the broker within its transaction timeout), at
    most ``timeout`` seconds; raises ``SavepointError`` then, or when a topic is missing."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": "headrace-savepoint-replay", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **(client_configs or {})})
    found: dict[int, set[str]] = {}
    try:
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, parts in offsets.items():
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise SavepointError(f"the real-time sink's output topic {topic} does not "
                                     "exist: the alerts it committed cannot be read back")
            for partition in meta.partitions:
                start = parts.get(str(partition), 0)
                _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                        timeout=timeout)
                if end > start:
                    ends[(topic, partition)] = (start, end)
        if not ends:
            return found
        consumer.assign([TopicPartition(t, p, s) for (t, p), (s, _) in ends.items()])
        deadline = time.monotonic() + timeout
        while ends:
            for m in consumer.consume(1000, timeout=0.2):
                if m.error():
                    continue
                headers = dict(m.headers() or [])
                task, row = headers.get(TASK_HEADER), headers.get(ID_HEADER)
                if task is not None and row is not None:
                    found.setdefault(int(task), set()).add(
                        row.decode() if isinstance(row, bytes) else row)
            done = consumer.position([TopicPartition(t, p) for (t, p) in ends])
            for tp in done:
                if tp.offset >= ends[(tp.topic, tp.partition)][1]:
                    del ends[(tp.topic, tp.partition)]
            if ends and time.monotonic() > deadline:
                raise SavepointError(
                    f"the real-time sink's output did not become readable (read_committed) "
                    f"up to {sorted(ends.items())} within {timeout:g} s: a transaction of "
                    "the old query is still open (is it still running?)")
    except KafkaException as e:
        raise SavepointError(f"cannot read the real-time sink's output at {bootstrap_servers}"
                             f": {e.args[0].str()}") from e
    finally:
        consumer.close()
    return found


def seed(savepoint: Path, replay: SinkReplay, sink_dir: str | Path, tasks: int,
         bootstrap_servers: str, client_configs: dict[str, str] | None = None,
         timeout: float = 60.0) -> int:
    """Before a query starts from the savepoint at ``savepoint`` (with a fresh checkpoint
    whose sink records go to ``sink_dir``, ``tasks`` sink tasks): write its skip sets, the
    ids the old query committed after the savepoint's batch (``committed_ids``) and those
    carried in the savepoint, as ``-1-<task>.rest``. Idempotent (a start that failed before
    its first commit writes them again, with what it wrote itself by then). Returns how many
    ids each task skips at most. Raises ``SavepointError`` (``committed_ids``)."""
    by_task = committed_ids(bootstrap_servers, replay.offsets, client_configs, timeout)
    for old, file in replay.ids.items():
        try:
            lines = (savepoint / file).read_text().splitlines()
        except OSError as e:
            raise SavepointError(f"cannot read {savepoint / file}: {e.strerror}") from e
        by_task.setdefault(int(old), set()).update(lines)
    everything: set[str] = set().union(*by_task.values())
    folder = Path(sink_dir)
    folder.mkdir(parents=True, exist_ok=True)
    most = 0
    for task in range(tasks):
        ids = by_task.get(task, set()) if tasks == replay.tasks else everything
        most = max(most, len(ids))
        tmp = folder / f".-1-{task}.rest.tmp"
        tmp.write_text("".join(f"id\t{i}\n" for i in sorted(ids)))
        os.replace(tmp, folder / f"-1-{task}.rest")
    return most
