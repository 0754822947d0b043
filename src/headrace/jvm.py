"""Where headrace's JVM pieces live, and how to run them.

``make setup`` (``scripts/setup-jvm.sh``) resolves the Maven project in ``jvm/`` from Maven
Central into ``jvm/lib/<component>/`` once:

- ``spark-kafka``: Spark's own Kafka connector (``format("kafka")``) and the jars PySpark lacks;
- ``kafka``: an Apache Kafka broker (KRaft) and Kafka's tools, the reference broker;
- ``clients``: the Java Kafka client and headrace's scenario driver for it;
- ``debezium``: Debezium's PostgreSQL connector (embedded engine) and a driver printing its
  events, the reference for ``headrace cdc postgres``;
- ``debezium-mariadb``: Debezium's MariaDB connector (3.5: the newest served) and a driver
  printing its events, the reference for ``headrace cdc mysql``;
- ``realtime``: the real-time path's JVM rule operator (``headrace.realtime``), compiled
  against the venv's PySpark jars.

``HEADRACE_JVM_LIB`` overrides the folder (e.g. for an installed, non-editable headrace).
Nothing here starts a JVM at import time; every function is cheap and side-effect free.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Literal

from headrace.errors import HeadraceError

Component = Literal["spark-kafka", "kafka", "clients", "realtime", "debezium",
                    "debezium-mariadb"]


class JvmUnavailableError(HeadraceError):
    """A JVM piece is missing: Java is not installed or ``jvm/lib`` was not built."""


def lib_dir() -> Path:
    """The folder holding one sub-folder of jars per component (it may not exist)."""
    override = os.environ.get("HEADRACE_JVM_LIB")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "jvm" / "lib"


def jars(component: Component) -> list[Path]:
    """Every jar of ``component``, sorted; raises ``JvmUnavailableError`` if there are none."""
    folder = lib_dir() / component
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise JvmUnavailableError(
            f"no jars in {folder}: run `make setup` (scripts/setup-jvm.sh resolves them "
            "from Maven Central)")
    return found


def classpath(component: Component) -> str:
    """A ``java -cp`` value for ``component``."""
    return os.pathsep.join(str(j) for j in jars(component))


def clients_classpath(kafka_clients_version: str | None = None) -> str:
    """A ``java -cp`` value for the Java client scenario driver (``clients``). With a
    version, its kafka-clients jar is swapped for ``kafka-clients-<version>.jar`` found in
    another component (3.9.2, the client Spark's connector uses, is in ``spark-kafka``);
    ``JvmUnavailableError`` if no component has it."""
    found = jars("clients")
    if kafka_clients_version is None:
        return classpath("clients")
    wanted = f"kafka-clients-{kafka_clients_version}.jar"
    replacement = sorted(lib_dir().glob(f"*/{wanted}"))
    if not replacement:
        raise JvmUnavailableError(f"no {wanted} under {lib_dir()}: run `make setup`")
    kept = [j for j in found if not j.name.startswith("kafka-clients-")]
    return os.pathsep.join(str(j) for j in [*kept, replacement[0]])


def available(component: Component) -> bool:
    """True when ``component``'s jars and a ``java`` executable are both present."""
    try:
        jars(component)
        java_executable()
    except JvmUnavailableError:
        return False
    return True


def extra_options() -> list[str]:
    """Options for every JVM headrace starts (Spark's driver in ``local_session``, Apache
    Kafka's processes), from ``HEADRACE_JVM_OPTIONS`` (shell words; none when unset).

    The test suite sets ``-XX:TieredStopAtLevel=1``: its JVMs live seconds to minutes on
    small data, where the C2 compiler's work costs more CPU than it saves. Cheap."""
    return shlex.split(os.environ.get("HEADRACE_JVM_OPTIONS", ""))


def java_executable() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java`` if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JvmUnavailableError("Java 17+ is required but `java` is not on PATH")
    return found
