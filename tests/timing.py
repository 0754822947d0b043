"""The suite reports its own time: at the end of every run, the slowest tests and the
total per area (the first folder under ``tests/``), each area against its budget.

An area over its budget gets a warning line (the run does not fail on it: time depends on
the machine; a budget is where growth gets noticed). Budgets are seconds of test time
(setup + call + teardown summed over the area's tests, on whichever worker ran them) on
the 2-core development machine; ``tests/README.md`` says how they were set.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

# seconds of test time per area on the 2-core machine (see tests/README.md)
BUDGETS: dict[str, float] = {
    "bench": 30,
    "cdc": 90,
    "compat": 150,
    "console": 60,
    "differential": 150,
    "eventsourcing": 60,
    "integration": 480,
    "pipelines": 180,
    "registry": 60,
    "spark": 300,
    "streaming": 240,
    "unit": 120,
}
SLOWEST = 15
# The longest modules (measured; the report above shows when another joins them), handed
# out first when pytest-xdist spreads modules over workers, so none starts last and runs
# alone at the end. The rest keep their collection order.
LONGEST_FIRST = (
    "tests/spark/test_exactly_once_crash.py",
    "tests/pipelines/test_fraud_pipeline.py",
    "tests/pipelines/test_fraud_realtime.py",
    "tests/streaming/test_joins.py",
    "tests/spark/test_spark_kafka.py",
    "tests/streaming/test_oracle.py",
    "tests/streaming/test_windows.py",
    "tests/spark/test_source.py",
    "tests/spark/test_scaleout.py",
    "tests/integration/test_transactions.py",
    "tests/spark/test_sink.py",
    "tests/pipelines/test_fraud_demo.py",
    "tests/cdc/test_connector.py",
    "tests/compat/test_java_client.py",
    "tests/integration/test_groups.py",
    "tests/pipelines/test_bank_projections.py",
    "tests/registry/test_durability.py",
    "tests/pipelines/test_bank_demo.py",
    "tests/streaming/test_scale.py",
)

_durations: dict[str, float] = defaultdict(float)


def area_of(nodeid: str) -> str:
    """``tests/spark/test_sink.py::test_x`` -> ``spark``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def schedule_rank(nodeid: str) -> int:
    """Where a test's module stands in ``LONGEST_FIRST`` (after all of them: not there)."""
    path = nodeid.split("::", 1)[0]
    return next((i for i, p in enumerate(LONGEST_FIRST) if path == p), len(LONGEST_FIRST))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first (a stable sort: the same order in every xdist worker)."""
    items.sort(key=lambda item: schedule_rank(item.nodeid))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Runs in the controlling process for every phase of every test (xdist forwards its
    workers' reports), so the totals cover the whole run."""
    _durations[report.nodeid] += report.duration


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
    unbudgeted = sorted(set(totals) - set(BUDGETS))
    if unbudgeted:
        write(f"WARNING: areas without a budget in tests/timing.py: {', '.join(unbudgeted)}",
              yellow=True, bold=True)
