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
