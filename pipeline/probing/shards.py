"""Splitting the probe targets into shards by host, for probing in several processes.

Politeness is kept per host by the prober of one process (its semaphore and interval
between request starts), so every target of a host goes to the same shard: no host is
ever probed from two processes at once. Hosts are dealt largest first to the shard with
the fewest targets so far, which evens out both the total work and the busiest host;
ties break on the host name, so the same targets always give the same shards.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.probing.probe import ProbeTarget, target_host


@dataclass(frozen=True)
class Shard:
    """The targets one process probes; `index` counts from 0."""

    index: int
    targets: tuple[ProbeTarget, ...]

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(target_host(target.url) for target in self.targets)


def split_by_host(targets: Iterable[ProbeTarget], count: int) -> list[Shard]:
    """At most `count` non-empty shards; a host's targets in one shard, in their given order."""
    if count < 1:
        raise ValueError(f"the number of shards must be at least 1 (got {count})")
    targets = list(targets)
    hosts = [target_host(target.url) for target in targets]
    sizes = Counter(hosts)
    lightest = [(0, index) for index in range(min(count, len(sizes)))]
    shard_of: dict[str, int] = {}
    for host, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(lightest)
        shard_of[host] = index
        heapq.heappush(lightest, (load + size, index))
    members: list[list[ProbeTarget]] = [[] for _ in lightest]
    for target, host in zip(targets, hosts, strict=True):
        members[shard_of[host]].append(target)
    return [Shard(index, tuple(group)) for index, group in enumerate(members)]
