"""The PySpark daemon of headrace's sessions and its launcher: which zips they drop from
``sys.path`` / ``PYTHONPATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.spark import daemon
from headrace.testing import scaled


def installed_pyspark(site: Path, py4j_version: str = "0.10.9.9") -> Path:
    """A pip-installed PySpark's layout under ``site``: the package, its zips, py4j's
    installation record."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    (lib / f"py4j-{py4j_version}-src.zip").write_bytes(b"")
    (site / f"py4j-{py4j_version}.dist-info").mkdir()
    return lib


def test_the_zips_of_the_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = installed_pyspark(site)
    jar = str(tmp_path / "spark-core.jar")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), jar, str(site)]
    assert daemon.installed_zips(path) == path[:2]


def test_zips_of_another_spark_stay(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    installed_pyspark(site)
    # a Spark distribution's SPARK_HOME: not the installed package
    other = tmp_path / "spark-4.3.0-bin" / "python" / "lib"
    other.mkdir(parents=True)
    path = [str(other / "pyspark.zip"), str(other / "py4j-0.10.9.9-src.zip"), str(site)]
    assert daemon.installed_zips(path) == []


def test_the_installed_zips_stay_when_their_package_is_not_on_the_path(tmp_path: Path) -> None:
    lib = installed_pyspark(tmp_path / "site-packages")
    assert daemon.installed_zips([str(lib / "pyspark.zip")]) == []


def test_a_py4j_zip_of_another_version_stays(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = installed_pyspark(site, py4j_version="0.10.9.7")
    (lib / "py4j-0.10.9.9-src.zip").write_bytes(b"")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(site)]
    assert daemon.installed_zips(path) == [path[0]]


def test_the_launcher_runs_this_python_without_the_installed_zips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Spark starts a Python process: the zips first on ``PYTHONPATH``. Through the
    launcher PySpark comes from the installed package, and the rest of the path stays."""
    import pyspark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    launcher = daemon.worker_python(sys.executable)
    assert Path(launcher).parent == tmp_path / "headrace"
    assert daemon.worker_python(sys.executable) == launcher  # written once, then found
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(z) for z in sorted(lib.glob("*.zip"))]
    assert zips, "a pip-installed PySpark ships its zips"
    kept = str(tmp_path / "elsewhere")
    code = "import sys, pyspark; print(pyspark.__file__); print(sys.path)"
    out = subprocess.run([launcher, "-c", code], capture_output=True, text=True,
                         timeout=scaled(60), check=True,
                         env={**os.environ, "PYTHONPATH": ":".join([*zips, kept])})
    pyspark_file, path = out.stdout.splitlines()
    assert pyspark_file == pyspark.__file__
    assert kept in path and not any(z in path for z in zips)


def test_another_python_is_left_as_it_is() -> None:
    assert daemon.worker_python("/usr/bin/python3") == "/usr/bin/python3"
