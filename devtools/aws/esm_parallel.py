"""One Kinesis shard read with a parallelization factor P, replayed in-process.

With `ParallelizationFactor` P, Lambda processes up to P batches of one shard at once and keeps
order only per partition key: all records of a key go to the same concurrent batch chain, in
shard order, while records of different keys may be processed at the same time by different
invocations. Each chain moves its own checkpoint, retries and bisects its own batches.

How Lambda assigns keys to chains is internal and not documented; the replay uses md5 of the
partition key modulo P. Only what Lambda promises matters here: one key -> one chain, in order.
The chains are drained concurrently, one thread each, every chain by its own `EventSourceMapping`
(reported item failures, retries, bisect on error, the on-failure callback), so a failure in one
chain redelivers that chain's batch while the others go on.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from devtools.aws.esm import EventSourceMapping, Invoke, ListShard, ShardRecord

__all__ = ["ParallelShard", "chain_of", "split_by_key"]


def chain_of(partition_key: str, factor: int) -> int:
    """The chain (0..factor-1) a partition key's records go to: the same one for every record of the key."""
    if factor < 1:
        raise ValueError("factor must be >= 1")
    return int.from_bytes(hashlib.md5(partition_key.encode()).digest()[:8], "big") % factor


def split_by_key(records: Sequence[ShardRecord], factor: int) -> list[list[ShardRecord]]:
    """One shard's records as `factor` chains, each in shard order."""
    chains: list[list[ShardRecord]] = [[] for _ in range(factor)]
    for record in records:
        chains[chain_of(record.partition_key, factor)].append(record)
    return chains


@dataclass
class ParallelShard:
    """Drains one shard as `factor` concurrent chains.

    `mapping(chain)` builds the event source mapping of chain number `chain` (so a test can give
    each chain its own client, and its own faults). The replay wraps each mapping's invoke to count
    the invocations in flight; with `start_together`, every non-empty chain's first invocation
    waits until all of them have started, so the chains really overlap. `drained[chain]` is set
    once that chain has delivered everything (a test can hold one chain back until the others are done).
    """

    factor: int
    mapping: Callable[[int], EventSourceMapping]
    start_together: bool = True
    peak_in_flight: int = 0
    mappings: list[EventSourceMapping] = field(default_factory=list)
    drained: list[threading.Event] = field(default_factory=list)
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def in_flight(self) -> int:
        """Invocations running right now, over all chains."""
        with self._lock:
            return self._in_flight

    def drain(self, records: Sequence[ShardRecord]) -> list[str | None]:
        """Deliver every record; returns each chain's final checkpoint (None for an empty chain).
        An exception that escapes a chain's mapping is raised here, after every chain has stopped."""
        chains = split_by_key(records, self.factor)
        busy = sum(1 for chain in chains if chain)
        barrier = threading.Barrier(busy, timeout=30) if self.start_together and busy > 1 else None
        self.drained = [threading.Event() for _ in range(self.factor)]
        self.mappings = [self.mapping(number) for number in range(self.factor)]
        for esm in self.mappings:
            esm.invoke = self._counted(esm.invoke, barrier)
        with ThreadPoolExecutor(max_workers=self.factor, thread_name_prefix="chain") as pool:
            futures = [pool.submit(self._drain_chain, number, chain) for number, chain in enumerate(chains)]
            return [future.result() for future in futures]

    def _drain_chain(self, number: int, chain: list[ShardRecord]) -> str | None:
        try:
            return self.mappings[number].drain(ListShard(chain)) if chain else None
        finally:
            self.drained[number].set()

    def _counted(self, invoke: Invoke, barrier: threading.Barrier | None) -> Invoke:
        first = [True]

        def counted(event: dict[str, Any]) -> dict[str, Any]:
            with self._lock:
                self._in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
                wait, first[0] = first[0], False
            try:
                if barrier is not None and wait:
                    barrier.wait()
                return invoke(event)
            finally:
                with self._lock:
                    self._in_flight -= 1

        return counted
