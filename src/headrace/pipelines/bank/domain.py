"""The bank account (seed 003): opened, deposited, withdrawn; never overdrawn.

Amounts are integer cents. ``MoneyDeposited`` and ``MoneyWithdrawn`` are at schema 2 (a
``reference`` was added); events written at schema 1 are upcast on read. A transfer spans
two aggregates, which may live on two partitions, so it is a saga of idempotent commands:
debit the source (``<transfer>:debit``), credit the target (``<transfer>:credit``), and if the
credit is rejected, refund the source (``<transfer>:refund``). Re-running a transfer with the
same id after a crash completes it without applying any step twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headrace.eventsourcing import Aggregate, EventTypes, Repository
from headrace.pipelines.errors import PipelineError

bank_events = EventTypes()


class CommandRejected(PipelineError):
    """A bank command is not allowed in the account's current state."""


@bank_events.register("AccountOpened")
@dataclass(frozen=True)
class Opened:
    owner: str


@bank_events.register("MoneyDeposited", schema=2)
@dataclass(frozen=True)
class Deposited:
    amount: int
    reference: str = ""


@bank_events.register("MoneyWithdrawn", schema=2)
@dataclass(frozen=True)
class Withdrawn:
    amount: int
    reference: str = ""


@bank_events.upcaster("MoneyDeposited", 1)
def _deposited_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "reference": "(before references)"}


@bank_events.upcaster("MoneyWithdrawn", 1)
def _withdrawn_v1(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "reference": "(before references)"}


class Account(Aggregate):
    """A bank account; ``balance`` in cents, never below zero."""

    def __init__(self, aggregate_id: str) -> None:
        super().__init__(aggregate_id)
        self.owner = ""
        self.is_open = False
        self.balance = 0

    def apply(self, event: Any) -> None:
        match event:
            case Opened(owner=owner):
                self.owner, self.is_open = owner, True
            case Deposited(amount=amount):
                self.balance += amount
            case Withdrawn(amount=amount):
                self.balance -= amount

    # -- commands: check, then return the events (never change self) --------------------

    def open(self, owner: str) -> list[Any]:
        if self.is_open:
            raise CommandRejected(f"account {self.id} is already open")
        return [Opened(owner)]

    def deposit(self, amount: int, reference: str = "") -> list[Any]:
        self._check(amount)
        return [Deposited(amount, reference)]

    def withdraw(self, amount: int, reference: str = "") -> list[Any]:
        self._check(amount)
        if amount > self.balance:
            raise CommandRejected(f"account {self.id}: withdrawing {amount} would overdraw "
                                  f"the balance of {self.balance}")
        return [Withdrawn(amount, reference)]

    def _check(self, amount: int) -> None:
        if not self.is_open:
            raise CommandRejected(f"account {self.id} is not open")
        if amount <= 0:
            raise CommandRejected(f"amount must be positive, got {amount}")


def transfer(accounts: Repository[Account], source: str, target: str, amount: int,
             transfer_id: str) -> bool:
    """Move ``amount`` from ``source`` to ``target``; True if it went through, False if the
    target refused it (the source was refunded). Raises ``CommandRejected`` if the source
    cannot pay. Safe to call again with the same ``transfer_id`` after a crash."""
    ref = f"transfer {transfer_id}"
    accounts.execute(source, lambda a: a.withdraw(amount, f"{ref} to {target}"),
                     command_id=f"{transfer_id}:debit", retries=10)
    try:
        accounts.execute(target, lambda a: a.deposit(amount, f"{ref} from {source}"),
                         command_id=f"{transfer_id}:credit", retries=10)
    except CommandRejected:
        accounts.execute(source, lambda a: a.deposit(amount, f"{ref} refunded"),
                         command_id=f"{transfer_id}:refund", retries=10)
        return False
    return True
