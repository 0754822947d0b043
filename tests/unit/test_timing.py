"""The suite's own time report (tests/timing.py): areas and budget warnings."""

from __future__ import annotations

from tests.timing import BUDGETS, area_of, over_budget


def test_area_is_the_first_folder_under_tests() -> None:
    assert area_of("tests/spark/test_sink.py::test_x[kafka]") == "spark"
    assert area_of("tests/unit/storage/test_log.py::test_y") == "unit"
    assert area_of("tests/conftest.py::x") == "tests"


def test_only_areas_over_their_budget_are_named() -> None:
    lines = over_budget({"spark": BUDGETS["spark"] + 1, "unit": BUDGETS["unit"] - 1,
                         "elsewhere": 10_000})
    assert len(lines) == 1 and "'spark'" in lines[0] and "over its budget" in lines[0]


def test_spark_tests_are_grouped_and_handed_out_first() -> None:
    from tests.timing import APPS_GROUP, SESSION_GROUP, group_of, schedule_rank
    assert group_of("tests/streaming/test_joins.py::t") == SESSION_GROUP
    assert group_of("tests/spark/test_exactly_once_crash.py::t") == APPS_GROUP
    assert group_of("tests/integration/test_cli.py::t[x]") == "tests/integration/test_cli.py"
    ranks = [schedule_rank(g) for g in (APPS_GROUP, SESSION_GROUP,
                                        "tests/integration/test_transactions.py",
                                        "tests/unit/test_timing.py")]
    assert ranks == sorted(ranks) and len(set(ranks)) == 4
