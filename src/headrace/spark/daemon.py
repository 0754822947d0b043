"""The PySpark daemon of headrace's sessions (``spark.python.daemon.module``).

A Spark application starts one daemon per kind of Python worker (tasks; and, for a Python
data source, one each for looking it up, creating it, planning its read, creating its
writer and committing) and the daemon forks the workers. This module runs PySpark's own
daemon (``pyspark.daemon.manager``) after the fix that makes every daemon and every
worker it forks cheaper, with nothing else changed.

- **PySpark from its compiled files.** Spark puts ``$SPARK_HOME/python/lib/pyspark.zip``
  (and py4j's zip) first on a worker's ``PYTHONPATH``. For a pip-installed PySpark that zip
  is a copy of the installed package without its bytecode, so each process compiled the
  PySpark modules it imported from source: a daemon cost 0.7 CPU s instead of 0.2. When
  the zips are those of the PySpark installed beside them (the zip inside the installed
  ``pyspark`` package, py4j's of the installed version: ``installed_zips``), they are
  dropped from ``sys.path`` and the same code is imported from the installed package.
  Any other zip (a Spark distribution's ``SPARK_HOME``) stays where Spark put it. Spark
  uses this module only for the tasks' daemon, so the sessions' ``PYSPARK_PYTHON`` is a
  launcher that does the same for every other Python process (``worker_python``).

Not preloaded: importing the tasks' modules (pyarrow, pandas, the connector) in the daemon
before the fork saved about 1 CPU s per worker, but a native library that starts a thread
on import makes a fork unsafe (the child inherits locks that thread holds), so each worker
imports what it runs after the fork, as PySpark's own daemon has it. (The table-join test
failure it was once blamed for was the test harness's: ``tests/README.md``.)

Cheap to import: nothing of PySpark is loaded before ``main`` has fixed ``sys.path``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

MODULE = "headrace.spark.daemon"
"""This module's name, for ``spark.python.daemon.module``."""


def installed_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are the zips of the PySpark installed in a later
    entry: ``<site>/pyspark/python/lib/pyspark.zip`` where ``<site>`` is on ``path``, and
    ``<site>/pyspark/python/lib/py4j-<version>-src.zip`` where ``<site>`` holds py4j
    ``<version>``'s installation. Looks at files only; imports nothing."""
    on_path = {str(Path(p).resolve()) for p in path if p}
    found = []
    for entry in path:
        zip_path = Path(entry)
        if zip_path.suffix != ".zip" or zip_path.parent.name != "lib":
            continue
        package = zip_path.parents[2]  # <site>/pyspark for <site>/pyspark/python/lib/x.zip
        site = package.parent
        if package.name != "pyspark" or not (package / "__init__.py").is_file() \
                or str(site.resolve()) not in on_path:
            continue
        if zip_path.name == "pyspark.zip":
            found.append(entry)
        elif zip_path.name.startswith("py4j-") and zip_path.name.endswith("-src.zip"):
            version = zip_path.name[len("py4j-"):-len("-src.zip")]
            if (site / f"py4j-{version}.dist-info").is_dir():
                found.append(entry)
    return found


def worker_python(python: str) -> str:
    """The command for Spark to start its Python processes with (``PYSPARK_PYTHON``).

    Only the tasks' daemon is ``spark.python.daemon.module``: Spark starts the daemons of
    the data source's other workers as ``pyspark.daemon`` and its streaming source's
    process directly, all with the zips first on ``PYTHONPATH``. So when ``python`` is
    this interpreter (whose installed PySpark the zips copy), the answer is a small bash
    launcher that drops exactly those zips (``installed_zips``) from ``PYTHONPATH`` and
    execs ``python``; ``python`` itself otherwise, or when the launcher cannot be
    written. The launcher is kept in the user's cache folder (``$XDG_CACHE_HOME`` or
    ``~/.cache``, ``headrace/``), named by its content, so writing it is idempotent and
    safe from several processes at once."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        return python
    import pyspark

    package = Path(pyspark.__file__).parent
    lib = package / "python" / "lib"
    zips = installed_zips([*(str(z) for z in sorted(lib.glob("*.zip"))), str(package.parent)])
    if not zips:
        return python
    lines = ["#!/bin/bash",
             "# PYSPARK_PYTHON of headrace's sessions (headrace.spark.daemon.worker_python):",
             "# the installed PySpark's zips of its sources off PYTHONPATH, then Python.",
             'p=":$PYTHONPATH:"']
    for z in zips:
        lines += [f"z={shlex.quote(z)}", 'p=${p//":$z:"/:}']
    lines += ["p=${p#:}", "p=${p%:}", 'export PYTHONPATH="$p"',
              f'exec {shlex.quote(python)} "$@"', ""]
    text = "\n".join(lines)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headrace"
    launcher = cache / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if launcher.is_file():
        return str(launcher)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".spark-python-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, launcher)
    except OSError:
        return python
    return str(launcher)


def main() -> None:
    for entry in installed_zips(sys.path):
        sys.path.remove(entry)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
