"""A checkpoint left by a crash inside its first offsets write restarts
(``headrace.spark.checkpoint``), on the session's real SparkSession."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.utils import StreamingQueryException

from headrace.spark.checkpoint import discard_unfinished_first_batch, local_path


def crashed_in_first_write(root: Path) -> list[Path]:
    """What a kill -9 inside Spark's first offsets write leaves: the temp file (part of
    the entry written) and its Hadoop checksum, named as Spark's CheckpointFileManager
    names them."""
    offsets = root / "offsets"
    offsets.mkdir(parents=True)
    name = f".0.{uuid.uuid4()}.tmp"
    temp, crc = offsets / name, offsets / f".{name}.crc"
    temp.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":17')
    crc.write_bytes(b"crc\x00")
    return [temp, crc]


def run_once(spark: SparkSession, checkpoint: Path) -> int:
    """Start a query on ``checkpoint``, let it finish what it reads; the batches run."""
    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return len(list((checkpoint / "commits").glob("[0-9]*")))


def test_a_query_restarts_on_a_checkpoint_killed_in_its_first_offsets_write(
        spark: SparkSession, tmp_path: Path) -> None:
    left = crashed_in_first_write(tmp_path / "cp")
    # Spark 4.3 alone refuses it: the query counts as new and its offsets folder is not empty.
    with pytest.raises(StreamingQueryException, match="should be empty on batch 0"):
        run_once(spark, tmp_path / "cp")
    assert sorted(discard_unfinished_first_batch(tmp_path / "cp")) == sorted(left)
    assert run_once(spark, tmp_path / "cp") >= 1
    # With a batch planned, nothing is touched again: Spark's logs skip temp names there.
    later = tmp_path / "cp" / "offsets" / f".1.{uuid.uuid4()}.tmp"
    later.write_text("v1\n")
    assert discard_unfinished_first_batch(f"file://{tmp_path / 'cp'}") == []
    assert later.exists()


def test_only_spark_temp_files_of_a_checkpoint_without_batches_are_removed(
        tmp_path: Path) -> None:
    left = crashed_in_first_write(tmp_path / "cp")
    commits = tmp_path / "cp" / "commits"
    commits.mkdir()
    commit_temp = commits / f".0.{uuid.uuid4()}.tmp"
    commit_temp.write_text("v1\n")
    foreign = [tmp_path / "cp" / "offsets" / "notes.tmp", commits / ".hidden"]
    for p in foreign:
        p.write_text("someone else's")
    state = tmp_path / "cp" / "state" / "0"
    state.mkdir(parents=True)

    assert sorted(discard_unfinished_first_batch(str(tmp_path / "cp"))) == sorted(
        [*left, commit_temp])
    assert all(p.exists() for p in foreign) and state.exists()
    # Nothing to do: no checkpoint yet, or one that is not on the local file system.
    assert discard_unfinished_first_batch(tmp_path / "fresh") == []
    assert discard_unfinished_first_batch("s3a://bucket/cp") == []
    assert local_path("s3a://bucket/cp") is None
    assert local_path(f"file://{tmp_path}") == tmp_path
