"""headrace.jvm: where the Maven-resolved jars are, and the error when they are not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace import jvm


def test_override_folder_lists_jars_sorted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kafka").mkdir()
    for name in ("b.jar", "a.jar", "notes.txt"):
        (tmp_path / "kafka" / name).write_bytes(b"")
    monkeypatch.setenv("HEADRACE_JVM_LIB", str(tmp_path))
    assert jvm.lib_dir() == tmp_path
    assert [p.name for p in jvm.jars("kafka")] == ["a.jar", "b.jar"]
    assert jvm.classpath("kafka") == os.pathsep.join(
        str(tmp_path / "kafka" / n) for n in ("a.jar", "b.jar"))


def test_missing_component_says_how_to_build_it(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_JVM_LIB", str(tmp_path))
    with pytest.raises(jvm.JvmUnavailableError, match="make setup"):
        jvm.jars("clients")
    assert not jvm.available("clients")


def test_setup_built_every_component() -> None:
    """`make setup` resolved all three components (this suite runs after it)."""
    components: tuple[jvm.Component, ...] = ("spark-kafka", "kafka", "clients")
    for component in components:
        assert jvm.available(component), component
    names = {p.name for p in jvm.jars("spark-kafka")}
    assert any(n.startswith("spark-sql-kafka-0-10_2.13-") for n in names)
    assert any(n.startswith("kafka-clients-") for n in names)
    # PySpark ships Scala itself; a second copy on the classpath would clash
    assert not any(n.startswith("scala-library") for n in names)
