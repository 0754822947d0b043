"""The suite reports its own time: at the end of every run, the slowest tests and the
total per area (the first folder under ``tests/``), each area against its budget.

An area over its budget gets a warning line (the run does not fail on it: time depends on
the machine; a budget is where growth gets noticed). Budgets are seconds of test time
(setup + call + teardown summed over the area's tests, on whichever worker ran them) on
the 2-core development machine; ``tests/README.md`` says how they were set.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import pytest

# seconds of test time per area under make test's three workers on the 2-core machine: a
# fresh-clone run plus about 15 % (see tests/README.md)
BUDGETS: dict[str, float] = {
    "integration": 775,
    "spark": 730,
    "pipelines": 680,
    "streaming": 575,
    "cluster": 520,
    "savepoints": 330,
    "cdc": 225,
    "differential": 155,
    "registry": 140,
    "eventsourcing": 135,
    "compat": 150,
    "unit": 125,
    "console": 50,
    "bench": 25,
}
SLOWEST = 15
# How make test spreads the work over its xdist workers (``pytest_xdist_make_scheduler``
# below): the modules that run Spark applications in subprocesses (crash, cluster and
# demo tests) in one group, the other modules of the Spark areas (the session's
# SparkSession) in a second, every other module a group of its own (a module's fixtures
# stay shared). A group runs whole on one worker. The two Spark groups go out first, so
# they run side by side on different workers, and the other modules fill in around
# them, the longest first.
SPARK_AREAS = frozenset({"spark", "streaming", "pipelines", "savepoints"})
SESSION_GROUP, APPS_GROUP = "spark-session", "spark-apps"
APPS_MODULES = frozenset({
    "tests/spark/test_exactly_once_crash.py",
    "tests/spark/test_scaleout.py",
    "tests/pipelines/test_fraud_pipeline.py",
    "tests/pipelines/test_fraud_realtime.py",
    "tests/pipelines/test_fraud_demo.py",
    "tests/pipelines/test_bank_demo.py",
    "tests/savepoints/test_savepoint_cli.py",
    "tests/savepoints/test_realtime_savepoint.py",
    "tests/cluster/test_spark_on_clusters.py",
})
LONGEST_FIRST = (
    "tests/cluster/test_failover.py",
    "tests/cluster/test_mirror.py",
    "tests/integration/test_transactions.py",
    "tests/cdc/test_connector.py",
    "tests/cdc/test_mysql.py",
    "tests/cdc/test_types.py",
    "tests/cdc/test_mysql_debezium.py",
    "tests/compat/test_java_client.py",
    "tests/integration/test_groups.py",
    "tests/registry/test_durability.py",
    "tests/integration/test_compaction.py",
    "tests/integration/test_tiered_storage.py",
    "tests/eventsourcing/test_repository.py",
)

_durations: dict[str, float] = defaultdict(float)
_timeline: list[dict[str, Any]] = []
"""Every phase of every test: nodeid, worker (``gw0`` ...), phase, start and stop (epoch s)."""
TIMELINE_ENV = "HEADRACE_TEST_TIMELINE"
"""A file to write every phase of every test to (JSON lines: nodeid, worker, phase, start,
stop), to see what ran when and what ran beside it; unset: nothing written."""


def area_of(nodeid: str) -> str:
    """``tests/spark/test_sink.py::test_x`` -> ``spark`` (an xdist ``@group`` suffix on the
    test's id changes nothing)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def group_of(nodeid: str) -> str:
    """The scheduling group of a test (see ``SESSION_GROUP``)."""
    path = nodeid.split("::", 1)[0]
    if path in APPS_MODULES:
        return APPS_GROUP
    if area_of(nodeid) in SPARK_AREAS:
        return SESSION_GROUP
    return path


def schedule_rank(group: str) -> int:
    """Where a group is handed out: the Spark groups, then ``LONGEST_FIRST``, then the
    rest (in collection order: the sort is stable)."""
    order = (APPS_GROUP, SESSION_GROUP, *LONGEST_FIRST)
    return order.index(group) if group in order else len(order)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order groups are handed out in (a stable sort: the same in every worker)."""
    items.sort(key=lambda item: schedule_rank(group_of(item.nodeid)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's per-module scheduling, with ``group_of`` as the unit. Run with
    ``--no-loadscope-reorder`` (make test does) so groups go out in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Runs in the controlling process for every phase of every test (xdist forwards its
    workers' reports), so the totals cover the whole run."""
    _durations[report.nodeid] += report.duration
    _timeline.append({"nodeid": report.nodeid,
                      "worker": str(getattr(report, "worker_id", None) or "main"),
                      "phase": report.when, "start": report.start, "stop": report.stop})


def over_budget(totals: dict[str, float]) -> list[str]:
    """The areas whose total passed their budget, each as a warning line."""
    return [f"area {area!r} took {total:.0f} s, over its budget of {BUDGETS[area]:.0f} s"
            for area, total in sorted(totals.items())
            if area in BUDGETS and total > BUDGETS[area]]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _durations:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"the {SLOWEST} slowest tests")
    for nodeid, seconds in sorted(_durations.items(), key=lambda kv: -kv[1])[:SLOWEST]:
        write(f"{seconds:8.1f} s  {nodeid}")
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for nodeid, seconds in _durations.items():
        totals[area_of(nodeid)] += seconds
        counts[area_of(nodeid)] += 1
    terminalreporter.section("test time per area (budget)")
    for area, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        budget = BUDGETS.get(area)
        limit = f"{budget:6.0f} s" if budget is not None else "  (none)"
        write(f"{area:<15} {total:8.1f} s  {counts[area]:5d} tests  budget {limit}")
    write(f"{'all':<15} {sum(totals.values()):8.1f} s  {len(_durations):5d} tests")
    for line in over_budget(dict(totals)):
        write(f"WARNING: {line}", yellow=True, bold=True)
    spans: dict[str, tuple[float, float]] = {}  # per worker: first start, last stop
    for row in _timeline:
        start, stop = spans.get(row["worker"], (row["start"], row["stop"]))
        spans[row["worker"]] = (min(start, row["start"]), max(stop, row["stop"]))
    if len(spans) > 1:  # a worker that ends long before the others is time lost
        end = max(stop for _, stop in spans.values())
        write("workers: " + ", ".join(
            f"{w} ran {stop - start:.0f} s (done {end - stop:.0f} s before the last)"
            for w, (start, stop) in sorted(spans.items())))
    timeline = os.environ.get(TIMELINE_ENV)
    if timeline:
        with open(timeline, "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in _timeline)
        write(f"every test's phases, with their times: {timeline}")
    unbudgeted = sorted(set(totals) - set(BUDGETS))
    if unbudgeted:
        write(f"WARNING: areas without a budget in tests/timing.py: {', '.join(unbudgeted)}",
              yellow=True, bold=True)
