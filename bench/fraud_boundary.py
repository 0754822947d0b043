"""Real-Time Mode's checkpoint boundaries on the fraud path: where the stall goes.

One run of the real-time path alone (embedded broker, JSON transactions, profiles from
their topic, no check, no console; ``headrace.pipelines.fraud.live``) with a short
checkpoint interval, so that several boundaries fall in the traffic, and Spark's log at
INFO (with milliseconds) for the streaming engine, the scheduler, the state store and the
exactly-once sink. From the log, per boundary (batch N-1 -> N):

- ``deadline -> tasks closed``: the source readers' deadline of batch N-1 to the last sink
  task's close (the operator's tasks finish their input, state stores commit);
- ``closed -> commit``: to ``commits/N-1`` written (tasks end, offsets and commit logs);
- ``commit -> next``: to the next batch's planning start (progress reporting);
- ``planning``: to the write starting (Spark plans batch N: analysis, optimisation,
  physical planning, broadcasts);
- ``launch -> sink open``: to the last sink task of batch N ready (job and tasks launched,
  shuffle and Kafka readers, state stores loaded, the sink's open);
- ``total``: deadline to sink ready; then the backlog is worked off.

and the sink's open time per task (a producer reused across batches), the first send of
each task and epoch, and the alerts' latency to the alert record around each boundary.
Run it once per build to compare (``HEADRACE_JVM_LIB`` names the build):

    .venv/bin/python bench/fraud_boundary.py --rate 2000 --duration 50 --interval "10 seconds"

``--conf key=value`` (repeatable) sets a Spark SQL setting for the query (an A/B of one).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} [%t] %p %c{1}: %m%n%ex
logger.hr.name = io.headrace
logger.hr.level = info
logger.spark.name = org.apache.spark
logger.spark.level = info
"""
STAGES = ("deadline -> tasks closed", "closed -> commit", "commit -> next", "planning",
          "launch -> sink open", "total")


def _secs(line: str) -> float:
    h, m, s = line[:12].split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def boundaries(log: list[str]) -> list[dict[str, float]]:
    """Per boundary after the first batch, the stages above in seconds (log time, UTC)."""
    deadlines: set[float] = set()
    close: dict[int, float] = {}
    opened: dict[int, float] = {}
    commit: dict[int, float] = {}
    planning: dict[int, float] = {}
    writing: dict[int, float] = {}
    for line in log:
        if not re.match(r"\d\d:\d\d:\d\d\.\d{3}", line):
            continue
        t = _secs(line)
        if m := re.search(r"low latency PartitionReader, stopping at (\d+)", line):
            d = datetime.fromtimestamp(int(m[1]) / 1000, UTC)
            deadlines.add(d.hour * 3600 + d.minute * 60 + d.second + d.microsecond / 1e6)
        elif m := re.search(r"epoch (\d+) partition \d+: close", line):
            close[int(m[1])] = max(close.get(int(m[1]), 0.0), t)
        elif m := re.search(r"epoch (\d+) partition \d+: open in", line):
            opened[int(m[1])] = max(opened.get(int(m[1]), 0.0), t)
        elif m := re.search(r"Renamed temp file .*/commits/\.(\d+)\.", line):
            commit[int(m[1])] = t
        elif m := re.search(r"Delay offset logging for batch (\d+)", line):
            planning[int(m[1])] = t
        elif m := re.search(r"Start processing data source write support: MicroBatchWrite"
                            r"\[epoch: (\d+)", line):
            writing[int(m[1])] = t
    out = []
    for n in sorted(opened):
        if n < 2 or n - 1 not in close or n - 1 not in commit or n not in writing:
            continue  # batch 0 -> 1 also starts the traffic
        deadline = max((d for d in deadlines if d <= close[n - 1] + 0.5), default=close[n - 1])
        out.append(dict(zip(STAGES, (
            close[n - 1] - deadline, commit[n - 1] - close[n - 1],
            planning.get(n, commit[n - 1]) - commit[n - 1],
            writing[n] - planning.get(n, commit[n - 1]), opened[n] - writing[n],
            opened[n] - deadline), strict=True)))
    return out


def run(rate: float, duration: float, interval: str, folder: Path,
        conf: dict[str, str]) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition
    from rich.console import Console

    from headrace.pipelines.fraud.live import LiveSettings, run_live
    from headrace.spark.session import local_session
    from headrace.testing import EmbeddedBroker

    log4j = folder / "log4j2.properties"
    log4j.write_text(LOG4J)
    spark = local_session("fraud-boundary", master="local[8]", jvm_log=str(folder / "spark.log"),
                          java_options=f"-Dlog4j2.configurationFile={log4j}")
    for key, value in conf.items():
        spark.conf.set(key, value)
    load = os.getloadavg()
    with EmbeddedBroker() as broker:
        summary = run_live(LiveSettings(
            rate=rate, duration_s=duration, bootstrap_servers=broker.bootstrap_servers,
            check=False, web_console=False, checkpoint=str(folder / "cp"),
            checkpoint_interval=interval, incidents_per_min=60, drain_timeout_s=60),
            Console(file=io.StringIO()))
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "b",
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition("fraud-alerts", 0, 0)])
        spark_ms, idle = [], time.monotonic()
        while time.monotonic() - idle < 3:
            for m in consumer.consume(500, 0.2):
                if not m.error():
                    alert = json.loads(m.value() or b"{}")
                    spark_ms.append(m.timestamp()[1] - alert["ingest_ms"])
                    idle = time.monotonic()
        consumer.close()
    spark.stop()
    log = (folder / "spark.log").read_text().splitlines()
    text = "\n".join(log)
    return {"load": [load[0], os.getloadavg()[0]], "p50": summary.p50_ms,
            "p99": summary.p99_ms, "alerts": len(spark_ms),
            "alerts over 200 ms to the alert record": sum(1 for v in spark_ms if v > 200),
            "boundaries": boundaries(log),
            "sink open ms (producer reused)": [
                int(v) for v in re.findall(r"open in (\d+) ms \(producer reused", text)],
            "first send ms": [int(v) for v in re.findall(r"first send \d+ ms after open, "
                                                       r"took (\d+) ms", text)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--duration", type=float, default=50.0)
    ap.add_argument("--interval", default="10 seconds", help="the checkpoint interval")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark SQL setting for the query")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fraud-boundary-"))
    (folder / "cp").mkdir()
    r = run(args.rate, args.duration, args.interval, folder,
            dict(c.split("=", 1) for c in args.conf))
    print(f"load average {r['load'][0]:.1f} -> {r['load'][1]:.1f}; detection p50 {r['p50']} "
          f"ms, p99 {r['p99']} ms; {r['alerts over 200 ms to the alert record']} of "
          f"{r['alerts']} alerts over 200 ms to the alert record; Spark's log: {folder}")
    for name in STAGES:
        values = [b[name] for b in r["boundaries"]]
        if values:
            print(f"{name:>26}: median {statistics.median(values):.2f} s  "
                  f"({', '.join(f'{v:.2f}' for v in values)})")
    opens = r["sink open ms (producer reused)"]
    if opens:
        print(f"sink open, producer reused: median {statistics.median(opens):g} ms, max "
              f"{max(opens)} ms; first send per task and epoch, slowest: "
              f"{sorted(r['first send ms'], reverse=True)[:3]} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
