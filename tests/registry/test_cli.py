"""``headrace schemas ...`` and ``headrace broker --schema-registry-port``, as a user runs
them: subprocesses against real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from headrace.testing import SchemaRegistryProcess, free_port, scaled
from tests.registry.schemas import USER_BREAKING, USER_V1, USER_V2


def cli(*args: str, registry: str | None = None, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    if registry:
        env["HEADRACE_SCHEMA_REGISTRY"] = registry
    return subprocess.run([sys.executable, "-m", "headrace", *args], capture_output=True,
                          text=True, input=stdin, env=env, timeout=scaled(60), check=False)


def test_schemas_commands(registry: SchemaRegistryProcess, subject: str,
                          tmp_path: Path) -> None:
    url = registry.url
    done = cli("schemas", "register", subject, USER_V1, registry=url)
    assert done.returncode == 0, done.stderr
    assert f"{subject} version 1: id " in done.stdout
    (tmp_path / "v2.avsc").write_text(USER_V2)
    assert cli("schemas", "register", subject, f"@{tmp_path / 'v2.avsc'}",
               registry=url).returncode == 0
    assert cli("schemas", "check", subject, "-", registry=url, stdin=USER_V2).stdout.strip() \
        == "compatible"
    refused = cli("schemas", "check", subject, USER_BREAKING, registry=url)
    assert refused.returncode == 1 and "incompatible" in refused.stderr
    listed = cli("schemas", "list", registry=url)
    assert f"{subject}  versions 1,2" in listed.stdout
    got = cli("schemas", "get", subject, "--version", "1", registry=url)
    assert '"version": 1' in got.stdout and '"subject"' in got.stdout
    assert cli("schemas", "config", subject, "--set", "full", registry=url).stdout.strip() \
        == "FULL"
    assert cli("schemas", "config", subject, registry=url).stdout.strip() == "FULL"
    assert "soft-deleted version(s) [1, 2]" in cli("schemas", "delete", subject,
                                                   registry=url).stdout
    gone = cli("schemas", "get", subject, registry=url)
    assert gone.returncode == 1 and "not found" in gone.stderr
    bad = cli("schemas", "register", subject, "{not a schema", registry=url)
    assert bad.returncode == 1 and "Invalid Avro schema" in bad.stderr
    down = cli("schemas", "list", registry=f"http://127.0.0.1:{free_port('127.0.0.1')}")
    assert down.returncode == 1 and "unreachable" in down.stderr


def test_broker_starts_a_registry_beside_it(tmp_path: Path) -> None:
    port, http_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    broker = subprocess.Popen(
        [sys.executable, "-m", "headrace", "broker", "--data-dir", str(tmp_path), "--port",
         str(port), "--schema-registry-port", str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + scaled(60)
        while True:
            try:
                answer = httpx.post(f"{url}/subjects/x-value/versions",
                                    json={"schema": USER_V1}, timeout=scaled(10))
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "no registry beside the broker"
                time.sleep(0.3)
        assert answer.status_code == 200 and answer.json()["id"] >= 1
    finally:
        broker.send_signal(signal.SIGTERM)
        out, _ = broker.communicate(timeout=scaled(30))
    assert "headrace registry listening on" in out
    assert "headrace registry stopped" in out, out
