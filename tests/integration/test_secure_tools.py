"""Every headrace tool speaks SASL_SSL when told to (``headrace -X`` / ``--command-config``,
librdkafka's setting names): the CLI (librdkafka and kafka-python paths), the schema
registry, the console and the event store, against a broker whose only way in for them is
SCRAM over TLS. A wrong password is a clear error, not a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.testing import ConsoleProcess, EmbeddedBroker, SchemaRegistryProcess, scaled
from tests.integration.test_sasl import users
from tests.integration.tls_support import Pki


@pytest.fixture(scope="module")
def broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(extra_args=[
            "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SECURE://127.0.0.1:0",
            "--listener-security-protocol-map", "SECURE:SASL_SSL",
            "--ssl-keystore-location", str(pki.server)]) as b:
        done = users(b, "add", "alice", password="alice-secret")
        assert done.returncode == 0, done.stderr
        yield b


def settings(pki: Pki, password: str = "alice-secret") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": password,
            "ssl.ca.location": str(pki.ca)}


@pytest.fixture(scope="module")
def command_config(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "client.properties"
    path.write_text("# SCRAM over TLS\n" + "".join(f"{k}={v}\n"
                                                     for k, v in settings(pki).items()))
    return path


def headrace(broker: EmbeddedBroker, config: Path, *args: str,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``headrace --command-config CONFIG ARGS -b <the SASL_SSL listener>``."""
    return subprocess.run([sys.executable, "-m", "headrace", "--command-config", str(config),
                           *args, "-b", broker.listeners["SECURE"]], input=stdin,
                          capture_output=True, text=True, timeout=scaled(90),
                          env={**os.environ, "COLUMNS": "200"})


def test_the_cli_over_sasl_ssl(broker: EmbeddedBroker, command_config: Path) -> None:
    done = headrace(broker, command_config, "topics", "create", "secure-cli", "--partitions", "2")
    assert done.returncode == 0, done.stderr
    done = headrace(broker, command_config, "produce", "secure-cli", stdin="one\ntwo\n")
    assert done.returncode == 0 and "Produced 2 records" in done.stdout, done.stderr
    done = headrace(broker, command_config, "consume", "secure-cli", "--from-beginning",
                    "-n", "2", "-g", "secure-group")
    assert done.returncode == 0 and sorted(done.stdout.split()) == ["one", "two"], done.stderr
    done = headrace(broker, command_config, "groups", "list")
    assert done.returncode == 0 and "secure-group" in done.stdout, done.stderr
    # kafka-python's admin client (transactions) takes the same settings
    done = headrace(broker, command_config, "transactions", "list")
    assert done.returncode == 0, done.stderr
    done = headrace(broker, command_config, "bank", "open", "acc-1", "alice")
    assert done.returncode == 0, done.stderr
    done = headrace(broker, command_config, "bank", "deposit", "acc-1", "1250")
    assert done.returncode == 0, done.stderr
    done = headrace(broker, command_config, "bank", "balance", "acc-1")
    assert done.returncode == 0 and "12.50" in done.stdout, done.stdout + done.stderr


def test_a_wrong_password_is_a_clear_error(broker: EmbeddedBroker, pki: Pki,
                                           tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("".join(f"{k}={v}\n" for k, v in settings(pki, "wrong").items()))
    done = headrace(broker, bad, "topics", "list")
    assert done.returncode != 0
    assert "cannot log in at" in done.stderr and "Authentication failed" in done.stderr, \
        done.stderr
    done = subprocess.run([sys.executable, "-m", "headrace", "-X", "no-equals-sign",
                           "topics", "list"], capture_output=True, text=True, timeout=scaled(60),
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2 and "is not KEY=VALUE" in done.stderr


def test_the_registry_over_sasl_ssl(broker: EmbeddedBroker, pki: Pki) -> None:
    with SchemaRegistryProcess(broker.listeners["SECURE"], topic="_secure_schemas",
                               client_config=settings(pki)) as registry:
        body = json.dumps({"schema": json.dumps({"type": "string"})}).encode()
        request = urllib.request.Request(
            f"{registry.url}/subjects/secure-value/versions", data=body, method="POST",
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(request, timeout=scaled(30)) as response:
            assert json.load(response)["id"] >= 1
    # the schema is in the log, written over SASL_SSL
    listed = subprocess.run([sys.executable, "-m", "headrace", "topics", "list", "-b",
                             broker.bootstrap_servers], capture_output=True, text=True,
                            timeout=scaled(60))
    assert "_secure_schemas" in listed.stdout


def test_the_console_over_sasl_ssl(broker: EmbeddedBroker, pki: Pki,
                                   command_config: Path) -> None:
    assert headrace(broker, command_config, "topics", "create", "secure-console").returncode == 0
    with ConsoleProcess(broker.listeners["SECURE"], client_config=settings(pki)) as console, \
            urllib.request.urlopen(f"{console.url}/topics", timeout=scaled(60)) as response:
        assert "secure-console" in response.read().decode()


def test_client_settings_after_any_subcommand(broker: EmbeddedBroker, pki: Pki) -> None:
    after = [a for k, v in settings(pki).items() for a in ("-X", f"{k}={v}")]
    for command in (["topics", "list"], ["groups", "list"]):
        # a wrong password before the subcommand, the right settings after it: those win
        done = subprocess.run([sys.executable, "-m", "headrace", "-X", "sasl.password=wrong",
                               *command, *after, "-b", broker.listeners["SECURE"]],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
    shown = subprocess.run([sys.executable, "-m", "headrace", "broker", "--help"],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "250"})
    help_text = " ".join(shown.stdout.split())
    assert all(p in help_text for p in ("PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL are "
                                        "served", "ssl.client.auth"))
