"""Splitting the probe targets into shards by host, for probing in several processes.

Politeness is kept per host by the prober of one process (its semaphore and interval
between request starts), so every target of a host goes to the same shard: no host is
ever probed from two processes at once. A redirect may lead elsewhere, so hosts linked by a
redirect seen before (`links`, from the store) are dealt as one group: from the night after
a redirect first shows, the host it leads to is probed from its source's shard alone. A
host a shard was not dealt is shared politely meanwhile (`ProbeSettings.own_hosts`).

Groups are dealt largest first to the shard with the fewest targets so far, which evens
out both the total work and the busiest host; ties break on the host name, so the same
targets always give the same shards.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from pipeline.probing.probe import ProbeTarget, target_host


@dataclass(frozen=True)
class Shard:
    """The targets one process probes; `index` counts from 0, of `of` shards in the run;
    `linked`: hosts without targets of their own that the shard's targets redirected to."""

    index: int
    targets: tuple[ProbeTarget, ...]
    linked: frozenset[str] = frozenset()
    of: int = 1

    @cached_property
    def hosts(self) -> frozenset[str]:
        """The hosts the shard was dealt: no other shard of the run has any of them (found
        once: a shard's prober and its report both ask, and a shard holds 100,000s of URLs)."""
        return frozenset(target_host(target.url) for target in self.targets) | self.linked


def host_groups(hosts: Iterable[str], links: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each host's group, named by its least host: hosts joined through `links` (a source
    host and the host it redirected to) are one group. Links from a host not in `hosts`
    are left out, and so is a host reached only through them."""
    parent = {host: host for host in hosts}
    sources = set(parent)

    def root(host: str) -> str:
        while parent[host] != host:
            parent[host] = parent[parent[host]]
            host = parent[host]
        return host

    for source, target in links:
        if source not in sources or not target or source == target:
            continue
        parent.setdefault(target, target)
        first, second = sorted((root(source), root(target)))
        parent[second] = first
    return {host: root(host) for host in parent}


def split_by_host(
    targets: Iterable[ProbeTarget], count: int, links: Iterable[tuple[str, str]] = ()
) -> list[Shard]:
    """At most `count` non-empty shards; a host's targets in one shard, in their given order,
    with the hosts `links` join to it (`host_groups`)."""
    if count < 1:
        raise ValueError(f"the number of shards must be at least 1 (got {count})")
    targets = list(targets)
    hosts = [target_host(target.url) for target in targets]
    group_of = host_groups(dict.fromkeys(hosts), links)
    sizes = Counter(group_of[host] for host in hosts)
    lightest = [(0, index) for index in range(min(count, len(sizes)))]
    shard_of: dict[str, int] = {}
    for group, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(lightest)
        shard_of[group] = index
        heapq.heappush(lightest, (load + size, index))
    members: list[list[ProbeTarget]] = [[] for _ in lightest]
    for target, host in zip(targets, hosts, strict=True):
        members[shard_of[group_of[host]]].append(target)
    linked: list[set[str]] = [set() for _ in lightest]
    target_hosts = set(hosts)
    for host, group in group_of.items():
        if host not in target_hosts:
            linked[shard_of[group]].add(host)
    return [Shard(index, tuple(group), frozenset(linked[index]), len(members))
            for index, group in enumerate(members)]
