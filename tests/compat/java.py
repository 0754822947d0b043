"""Runs the Java client scenario driver (``jvm/clients``, ``io.headrace.clients.Main``).

Each run is one JVM: ``java -cp <jars> io.headrace.clients.Main SCENARIO --bootstrap B
--topic T``; the scenario creates its topics from ``T``, runs a fixed workload with the plain
kafka-clients API and prints one JSON document of what it observed, which is returned here.
The jars come from ``make setup`` (``jvm/lib/clients``); without them ``headrace.jvm``
raises ``JvmUnavailableError`` (the tests fail with that message, they do not skip).

Two client versions: 4.4.0 (the driver's own build) and 3.9.2, the version Spark's Kafka
connector uses, run by swapping the kafka-clients jar (``jvm/lib/spark-kafka``) under the
same driver (``headrace.jvm.clients_classpath``) (it only calls APIs present in both; the Admin scenarios need 4.x).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headrace import jvm
from headrace.testing import scaled

DRIVER = "io.headrace.clients.Main"
BUILT_AGAINST = "4.4.0"  # jvm/pom.xml kafka.clients.version
JVM_TIMEOUT = 120.0
# Scenarios with a group: on the reference broker a consumer that times out waiting for
# its records (seen in CI runs under full load, never reproduced alone) is run once more
# on fresh topics, with a warning (``run_on`` says which topic the observations name). So is
# any scenario whose JVM outlives JVM_TIMEOUT on the reference broker (the idempotent
# producer hung there once in a CI run; 60 runs under a CPU hog never did), its thread
# dump and the broker's log in the warning. On headrace every failure counts.
REFERENCE_RETRIED = frozenset({"commits", "assignors", "static-membership", "consumer-protocol",
                               "admin"})
# A scenario's JVM that outlives JVM_TIMEOUT is asked for a thread dump (SIGQUIT) and given
# this long to print it before it is killed.
DUMP_GRACE = 5.0


class ScenarioTimeout(AssertionError):
    """A scenario's JVM ran past its timeout. The message holds what it printed (its log,
    the thread dump of where it hung) and the broker's last log lines."""


def timed_out_report(cmd: list[str], out: str, err: str, broker_log: list[str]) -> str:
    """The failure message of a JVM killed at its timeout: command, its stderr, its
    stdout (where the thread dump went) and the broker's log tail, each cut to its end."""
    return (f"java scenario timed out: {' '.join(cmd[-5:])}\n--- its stderr (end):\n"
            f"{err[-8000:]}\n--- its stdout and thread dump (end):\n{out[-12000:]}\n"
            f"--- the broker's last log lines:\n{''.join(broker_log[-40:])}")


@dataclass(frozen=True)
class JavaClient:
    """The driver pointed at one broker. ``broker`` is ``headrace`` or ``kafka`` (Apache
    Kafka, the reference), ``node_id`` that broker's node id."""

    broker: str
    bootstrap: str
    node_id: int
    version: str = BUILT_AGAINST
    # The broker's kept log lines, for a timeout's report.
    broker_log: Callable[[], list[str]] = field(default=list, compare=False, repr=False)

    def run(self, scenario: str, topic: str) -> dict[str, Any]:
        """Run ``scenario`` in a fresh JVM; its JSON observations. Blocks (bounded)."""
        return self.run_on(scenario, topic)[0]

    def run_on(self, scenario: str, topic: str) -> tuple[dict[str, Any], str]:
        """``run``, and the topic name the observations are of (``topic``, or the fresh one
        of a retry on the reference broker)."""
        try:
            done = self._run(scenario, topic)
            stalled = (done.returncode != 0 and scenario in REFERENCE_RETRIED
                       and "timed out consuming" in done.stderr)
            report = done.stderr[-12000:]
        except ScenarioTimeout as e:
            if self.broker != "kafka":
                raise
            stalled, report = True, str(e)
        if stalled and self.broker == "kafka":
            warnings.warn(f"java scenario {scenario} timed out on the reference broker; run "
                          f"again on fresh topics. Its log:\n{report}", stacklevel=2)
            topic = f"{topic}-again"
            done = self._run(scenario, topic)
        if done.returncode != 0:
            raise AssertionError(
                f"java scenario {scenario} (kafka-clients {self.version}, {self.broker}) "
                f"exited {done.returncode}:\n{done.stderr[-12000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout)
        return result, topic

    def _run(self, scenario: str, topic: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            jvm.java_executable(),
            "-Xshare:auto",
            *jvm.extra_options(),  # the suite's: C1 only, the run's temporary folder
            "-Xmx256m",
            "-cp",
            jvm.clients_classpath(None if self.version == BUILT_AGAINST else self.version),
            DRIVER,
            scenario,
            "--bootstrap",
            self.bootstrap,
            "--topic",
            topic,
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=scaled(JVM_TIMEOUT))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGQUIT)  # the JVM prints every thread's stack to stdout
            # and goes on running: the dump is in what it printed by the kill
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=DUMP_GRACE)
            proc.kill()
            out, err = proc.communicate()
            raise ScenarioTimeout(timed_out_report(cmd, out, err, self.broker_log())) from None
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
