"""headrace.jvm: where the Maven-resolved jars are, the Java client driver's classpath, and
the error when jars are missing (no JVM started)."""

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


@pytest.fixture
def lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in (
        "clients/headrace-clients.jar",
        "clients/kafka-clients-4.4.0.jar",
        "clients/zstd-jni-1.5.7-17.jar",
        "spark-kafka/kafka-clients-3.9.2.jar",
        "spark-kafka/spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    monkeypatch.setenv("HEADRACE_JVM_LIB", str(tmp_path))
    return tmp_path


def test_clients_classpath_swaps_the_kafka_clients_jar(lib: Path) -> None:
    assert jvm.clients_classpath().split(os.pathsep) == [
        str(lib / "clients" / n)
        for n in ("headrace-clients.jar", "kafka-clients-4.4.0.jar", "zstd-jni-1.5.7-17.jar")
    ]
    assert jvm.clients_classpath("3.9.2").split(os.pathsep) == [
        str(lib / "clients" / "headrace-clients.jar"),
        str(lib / "clients" / "zstd-jni-1.5.7-17.jar"),
        str(lib / "spark-kafka" / "kafka-clients-3.9.2.jar"),
    ]


def test_missing_jars_raise_jvm_unavailable(lib: Path) -> None:
    with pytest.raises(jvm.JvmUnavailableError, match=r"kafka-clients-3\.0\.0\.jar"):
        jvm.clients_classpath("3.0.0")
    for jar in (lib / "clients").iterdir():
        jar.unlink()
    with pytest.raises(jvm.JvmUnavailableError, match="run `make setup`"):
        jvm.clients_classpath()


def test_the_demo_names_what_the_real_time_path_lacks(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from headrace.pipelines.fraud.live import realtime_unavailable

    monkeypatch.setenv("HEADRACE_JVM_LIB", str(tmp_path))
    assert realtime_unavailable() == "Spark's Kafka connector (jvm/lib/spark-kafka) was not built"
    (tmp_path / "spark-kafka").mkdir()
    (tmp_path / "spark-kafka" / "x.jar").write_bytes(b"")
    assert realtime_unavailable() == \
        "the real-time rule operator (jvm/lib/realtime) was not built"
    (tmp_path / "realtime").mkdir()
    (tmp_path / "realtime" / "headrace-realtime.jar").write_bytes(b"")
    assert realtime_unavailable() is None
