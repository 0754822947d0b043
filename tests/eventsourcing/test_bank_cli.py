"""``headrace bank ...``: the bank account from the command line, one command at a time."""

from __future__ import annotations

import subprocess
import sys

from headrace.testing import EmbeddedBroker, scaled


def bank(broker: EmbeddedBroker, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headrace", "bank", *args, "--topic", topic,
                           "-b", broker.bootstrap_servers], capture_output=True, text=True,
                          timeout=scaled(120), check=False)


def test_bank_commands(broker: EmbeddedBroker, topic_name: str) -> None:
    def ok(*args: str) -> str:
        done = bank(broker, topic_name, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "a1: 0.00 EUR, owner Ann, version 1" in ok("open", "a1", "Ann")
    ok("open", "a2", "Bo")
    assert "a1: 120.00 EUR" in ok("deposit", "a1", "12000", "--command-id", "pay-1")
    assert "a1: 120.00 EUR, owner Ann, version 2" in ok(
        "deposit", "a1", "12000", "--command-id", "pay-1")  # sent again: applied once
    refused = bank(broker, topic_name, "withdraw", "a1", "20000")
    assert refused.returncode == 1 and "would overdraw the balance of 12000" in refused.stderr
    out = ok("transfer", "a1", "a2", "5000", "--id", "t-9")
    assert "a1: 70.00 EUR" in out and "a2: 50.00 EUR" in out
    out = ok("transfer", "a1", "a2", "5000", "--id", "t-9")
    assert "a1: 70.00 EUR" in out and "a2: 50.00 EUR" in out
    assert "a1: 120.00 EUR, owner Ann, version 2" in ok("balance", "a1", "--version", "2")
    assert "a1: 0.00 EUR, owner -, version 0" in ok("balance", "a1", "--at", "2000-01-01T00:00")
    bad = bank(broker, topic_name, "balance", "a1", "--at", "yesterday")
    assert bad.returncode == 2 and "not an ISO 8601 time" in bad.stderr
