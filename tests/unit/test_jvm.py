"""headrace.jvm's jar lookup (no JVM started): the Java client driver's classpath."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headrace import jvm


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
