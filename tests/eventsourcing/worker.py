"""A writer process for the concurrency and crash tests:

    python -m tests.eventsourcing.worker BOOTSTRAP TOPIC NAME MODE COMMANDS THREADS SEED ACCOUNTS...

MODE ``race``: THREADS threads each run COMMANDS random deposits/withdrawals (retries=0) on
the accounts and print one JSON line per outcome. MODE ``deposits``: one thread deposits
``i`` cents for i in 1..COMMANDS into the first account with command id ``NAME-i`` (retries
on conflicts) and prints ``{"ack": i}`` after each acknowledged one.
"""

from __future__ import annotations

import json
import random
import sys
import threading

from headrace.eventsourcing import ConcurrencyError, EventStore, Repository
from headrace.pipelines.bank.domain import Account, CommandRejected, bank_events
from headrace.testing import scaled

_print_lock = threading.Lock()


def say(doc: dict[str, object]) -> None:
    with _print_lock:
        print(json.dumps(doc), flush=True)


def race(repo: Repository[Account], name: str, commands: int, seed: int,
         accounts: list[str]) -> None:
    rng = random.Random(seed)
    for i in range(commands):
        account, amount = rng.choice(accounts), rng.randint(1, 60)
        deposit = rng.random() < 0.45
        command = f"{name}-{i}"

        def decide(a: Account, amount: int = amount, deposit: bool = deposit) -> list[object]:
            return a.deposit(amount) if deposit else a.withdraw(amount)

        try:
            _agg, result = repo.execute(account, decide, command_id=command)
        except ConcurrencyError:
            say({"command": command, "outcome": "conflict"})
        except CommandRejected:
            say({"command": command, "outcome": "rejected"})
        else:
            assert result is not None
            say({"command": command, "outcome": "ok", "account": account,
                 "first": result.first_version, "last": result.last_version})


def deposits(repo: Repository[Account], name: str, commands: int, account: str) -> None:
    for i in range(1, commands + 1):
        repo.execute(account, lambda a, i=i: a.deposit(i), command_id=f"{name}-{i}",  # type: ignore[misc]
                     retries=100)
        say({"ack": i})


def main() -> None:
    bootstrap, topic, name, mode, commands, threads, seed, *accounts = sys.argv[1:]
    with EventStore(bootstrap, topic, bank_events, timeout=scaled(30)) as store:
        repo = Repository(store, Account, snapshot_every=7)
        if mode == "deposits":
            deposits(repo, name, int(commands), accounts[0])
            return
        workers = [threading.Thread(target=race, args=(repo, f"{name}.{t}", int(commands),
                                                       int(seed) * 100 + t, accounts))
                   for t in range(int(threads))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


if __name__ == "__main__":
    main()
