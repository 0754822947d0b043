"""The fraud demo's check: the micro-batch pipeline in a Spark application of its own, behind
the real-time path.

In the demo the real-time path comes first: its 200 ms goal does not survive the
micro-batch pipeline's Python workers competing for the same two cores. So the check runs
in a child process (``python -m headrace.pipelines.fraud.checker``) at a lower CPU priority
(``nice``, inherited by its Spark JVM and the Python workers that JVM forks), on its own
``local[2]`` session, with a trigger of seconds and batches of at most ``batch_seconds`` of
traffic: while transactions stream it takes the CPU the real-time path leaves over and may
lag; once the traffic stops it catches up, batch by batch in arrival order (so its
watermark, and the late side output, advance as they would live).

The parent drives it through the child's standard input (a ``start`` line starts the query
once the topics exist; end of input stops the query and the process, so the child never
outlives a demo that died) and reads its standard output: lines beginning ``CHECKER_MARK``
with JSON, ``{"ready": metrics URL}``, then after every batch (a query listener's
progress event) ``{"batches", "parsed", "late", "rows_per_s", "read": {topic: offsets
finished, summed over partitions}}`` (counts over the whole run) and ``{"failed": error}``
if the query dies. ``CheckerProcess`` is the parent's side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from headrace.pipelines.errors import PipelineError
from headrace.pipelines.fraud.pipeline import PipelineTopics
from headrace.testing import free_port

CHECKER_MARK = "headrace-checker "
NICE = 5
"""The check's niceness: CFS weighs a nice-5 process at about a third of a nice-0 one, so
the real-time path (nice 0) comes first; much lower and, on a machine busy with other work
(a test suite), the check starves and the demo waits for it."""


class CheckerError(PipelineError):
    """The checking pipeline's process did not start or failed."""


@dataclass(frozen=True)
class CheckerSettings:
    bootstrap_servers: str
    checkpoint: str
    topics: PipelineTopics = field(default_factory=PipelineTopics)
    schema_registry_url: str = ""
    profiles_envelope: str = ""
    rate: float = 200.0
    """Transactions/s of the run: a batch reads at most ``batch_seconds`` of them."""
    batch_seconds: float = 5.0
    """At most this much traffic per batch: the demo's first late record comes 10 s into
    the stream, after the first batch with transactions (which has no watermark yet)."""
    trigger_ms: int = 2000
    nice: int = NICE
    jvm_log: str | None = None
    metrics_port: int = 0
    """Where the child serves its query's metrics (0: ``CheckerProcess`` picks a free
    port, so the URL is known before the child's slow, low-priority start)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> CheckerSettings:
        d = json.loads(text)
        d["topics"] = PipelineTopics(**d["topics"])
        return CheckerSettings(**d)

    @property
    def max_offsets_per_trigger(self) -> int:
        return max(int(self.rate * self.batch_seconds), 100)


class CheckerProcess:
    """The parent's handle on the checking pipeline's process. A reader thread keeps the
    progress fields (``batches``, ``parsed``, ``late``, ``rows_per_s``, ``read``) and
    ``exception()`` current; the methods are for one thread."""

    name = "fraud-check"

    def __init__(self, settings: CheckerSettings) -> None:
        if not settings.metrics_port:
            settings = dataclasses.replace(settings, metrics_port=free_port("127.0.0.1"))
        self.settings = settings
        self.metrics_url = f"http://127.0.0.1:{settings.metrics_port}/metrics"
        self.batches = self.parsed = self.late = 0
        self.rows_per_s = 0.0
        self.read: dict[str, int] = {}
        """Offsets of each topic the query has finished (summed over partitions)."""
        self._failed: str | None = None
        self._ready = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def spawn(self) -> CheckerProcess:
        """Start the process (it starts its Spark session). Does not wait."""
        nice = self.settings.nice

        def lower_priority() -> None:  # in the child, before exec: everything it starts
            os.nice(nice)              # inherits the niceness

        log = self.settings.jvm_log
        # its Python's own complaints go where its JVM's do
        with open(log, "ab") if log else open(os.devnull, "wb") as err:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "headrace.pipelines.fraud.checker",
                 self.settings.to_json()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, bufsize=1, preexec_fn=lower_priority if nice else None)
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,),
                                        name="checker-reader", daemon=True)
        self._reader.start()
        return self

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            if not line.startswith(CHECKER_MARK):
                continue  # the JVM's or a library's own output
            said = json.loads(line[len(CHECKER_MARK):])
            if "ready" in said:
                self._ready.set()
            elif "failed" in said:
                self._failed = said["failed"]
            else:
                self.read = said["read"]
                self.batches, self.parsed, self.late = (said["batches"], said["parsed"],
                                                        said["late"])
                self.rows_per_s = said["rows_per_s"]
        if self._failed is None and not self._stopping():
            self._failed = "the checking process exited"
        self._ready.set()

    def _stopping(self) -> bool:
        return self._process is None or self._process.stdin is None \
            or self._process.stdin.closed

    def wait_ready(self, timeout_s: float) -> str:
        """Block until the child's session is up; its metrics URL. ``CheckerError`` if it
        failed or took longer than ``timeout_s``."""
        if not self._ready.wait(timeout_s) or self._failed is not None:
            raise CheckerError("the checking pipeline did not start: "
                               f"{self._failed or f'no answer in {timeout_s:g} s'}")
        return self.metrics_url

    def start_query(self) -> None:
        """Tell the child to start its query (the topics must exist); it does once its
        session is up. Does not block."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write("start\n")
        self._process.stdin.flush()

    def exception(self) -> str | None:
        """Why the query or its process failed, or None."""
        return self._failed

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the query and the process (end of its input; SIGKILL after ``timeout_s``).
        Idempotent."""
        process = self._process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(OSError):  # the child has gone already
                process.stdin.close()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(5)


_SAY = threading.Lock()  # the listener's thread and the main thread both speak


def _say(what: dict[str, Any]) -> None:
    with _SAY:
        sys.stdout.write(CHECKER_MARK + json.dumps(what) + "\n")
        sys.stdout.flush()


class _Totals:
    """Folds every progress event of the query (a listener sees each batch, where polling
    ``lastProgress`` would miss some) into the run's counts, and says them."""

    def __init__(self) -> None:
        self.batches = self.parsed = self.late = 0

    def fold(self, progress: dict[str, Any]) -> None:
        metrics = progress.get("observedMetrics") or {}
        self.batches += 1
        self.parsed += int((metrics.get("parsed") or {}).get("transactions", 0))
        self.late += int((metrics.get("out") or {}).get("late", 0))
        read: dict[str, int] = {}
        for source in progress["sources"]:
            end = source.get("endOffset") or {}
            # the progress event's JSON has the offsets as an object, lastProgress as text
            for topic, parts in (json.loads(end) if isinstance(end, str) else end).items():
                read[topic] = read.get(topic, 0) + sum(int(o) for o in parts.values())
        _say({"batches": self.batches, "parsed": self.parsed, "late": self.late,
              "rows_per_s": float(progress.get("processedRowsPerSecond") or 0.0),
              "read": read})


def main(argv: list[str]) -> int:
    """The child: ``python -m headrace.pipelines.fraud.checker SETTINGS_JSON``."""
    from headrace.pipelines.fraud.pipeline import PipelineConfig, start
    from headrace.spark.metrics import serve_pipeline_metrics
    from headrace.spark.session import local_session

    settings = CheckerSettings.from_json(argv[0])
    spark = local_session("headrace-fraud-check", master="local[2]",
                          kafka_connector=False, jvm_log=settings.jvm_log)
    spark.sparkContext.setLogLevel("OFF")  # its failure comes through _say
    _listener, url = serve_pipeline_metrics(
        spark, port=settings.metrics_port,
        dead_letter_topics={CheckerProcess.name: settings.topics.dead_letters},
        bootstrap_servers=settings.bootstrap_servers)
    _say({"ready": url})
    if sys.stdin.readline().strip() != "start":
        return 0
    from pyspark.sql.streaming.listener import StreamingQueryListener

    totals = _Totals()

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            try:
                totals.fold(json.loads(event.progress.json))
            except Exception as e:  # PySpark would swallow it: the demo must hear
                _say({"failed": f"cannot read the check's progress: {e!r}"})

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())
    query = start(spark, PipelineConfig(
        settings.bootstrap_servers, settings.checkpoint, topics=settings.topics,
        trigger_ms=settings.trigger_ms, max_offsets_per_trigger=settings.max_offsets_per_trigger,
        schema_registry_url=settings.schema_registry_url,
        profiles_envelope=settings.profiles_envelope), query_name=CheckerProcess.name)
    ended = threading.Event()
    # end of input: the demo is done (or died): stop

    def wait_for_end_of_input() -> None:
        sys.stdin.read()
        ended.set()

    threading.Thread(target=wait_for_end_of_input, daemon=True).start()
    while not ended.is_set() and query.isActive:
        ended.wait(0.2)
    if query.exception() is not None:
        _say({"failed": str(query.exception()).splitlines()[0]})
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
