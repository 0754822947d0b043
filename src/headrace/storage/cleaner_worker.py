"""The CPU-heavy half of a cleaning pass, run in the cleaner's worker process.

The broker's event loop reads segment files, writes the cleaned ones and swaps them in;
what costs CPU (decompressing batches, building the key map, filtering records,
rebuilding and recompressing batches) runs here, on whole batches the loop sends in
chunks, in a separate process at a lower scheduling priority, so a busy cleaner neither
holds the event loop nor takes its CPU. One pass at a time: its state (the offset map,
the transaction tracker, counters) stays in this module between calls. The same
functions run in-process when a pass is driven synchronously (tests, the benchmark).
Every argument and result is picklable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from headrace.protocol.batch_codec import batch_records
from headrace.protocol.errors import ProtocolError
from headrace.protocol.records import header_fields, parse_header
from headrace.storage.batch_cleaner import BatchCleaner, CleanStats, TxnTracker
from headrace.storage.offset_map import OffsetMap
from headrace.storage.producer_state import AbortedTxn

# How much lower the worker runs than the broker (nice increment).
WORKER_NICENESS = 10
PARENT_CHECK_S = 0.5


@dataclass(frozen=True)
class PassSetup:
    """What the worker needs to know of the log for one pass."""

    pass_id: int
    first_dirty: int
    now_ms: int
    delete_retention_ms: int
    dedupe_buffer_size: int
    aborted: tuple[AbortedTxn, ...]
    # producer id -> (offset of its last data batch or None, epoch)
    producers: dict[int, tuple[int | None, int]]


@dataclass
class PassResult:
    """The worker's side of a finished pass."""

    stats: CleanStats
    next_horizon: int
    removed_aborts: list[tuple[int, int]] = field(default_factory=list)


class _Pass:
    def __init__(self, setup: PassSetup) -> None:
        self.setup = setup
        self.omap = OffsetMap(setup.dedupe_buffer_size)
        self.txns = TxnTracker(list(setup.aborted))
        self.stats = CleanStats()
        self.cleaner: BatchCleaner | None = None


_PASSES: dict[int, _Pass] = {}


def worker_init() -> None:
    """Process-pool initializer: lower priority; Ctrl-C is the broker's to handle; exit
    when the broker is gone (a ``kill -9`` leaves the pool no chance to stop us, and the
    spawned worker holds both ends of its call queue, so it would never see EOF)."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def begin_pass(setup: PassSetup) -> None:
    """Start a pass (forgetting any pass left unfinished)."""
    _PASSES.clear()
    _PASSES[setup.pass_id] = _Pass(setup)


def map_batches(pass_id: int, batches: list[bytes]) -> bool:
    """Put the keys of the dirty batches among ``batches`` in the map, leaving out
    control batches and aborted transactions; returns whether the map is full."""
    p = _PASSES[pass_id]
    first_dirty = p.setup.first_dirty
    put = p.omap.put
    for raw in batches:
        h = parse_header(raw)
        if h.last_offset < first_dirty or h.is_control or p.txns.is_aborted(h):
            continue
        try:
            records = batch_records(raw, h)[1]
        except ProtocolError:
            continue
        base = h.base_offset
        for r in records:
            if r.key is not None:
                put(r.key, base + r.offset_delta)
    return p.omap.full


def clean_batches(pass_id: int, batches: list[bytes]) -> tuple[bytes, list[tuple[int, ...]]]:
    """What survives of ``batches`` (in offset order, after every batch before them):
    the bytes to append to the cleaned segment and their headers' fields (plain tuples:
    they cross the process boundary far faster than ``BatchHeader`` objects)."""
    p = _PASSES[pass_id]
    if p.cleaner is None:
        s = p.setup
        p.cleaner = BatchCleaner(p.omap, p.txns, s.producers, s.now_ms, s.delete_retention_ms,
                                 p.stats)
    out = bytearray()
    headers: list[tuple[int, ...]] = []
    for raw in batches:
        kept = p.cleaner.clean_batch(parse_header(raw), raw)
        if kept is not None:
            headers.append(header_fields(kept))
            out += kept
    return bytes(out), headers


def end_pass(pass_id: int) -> PassResult:
    """Finish the pass: its counters, the earliest pending delete horizon, and the
    aborted transactions whose markers were removed."""
    p = _PASSES.pop(pass_id)
    p.stats.map_keys = len(p.omap)
    if p.cleaner is None:
        return PassResult(p.stats, -1)
    return PassResult(p.stats, p.cleaner.next_horizon, sorted(set(p.cleaner.removed_aborts)))
