"""How many worker processes the pools take: one per core this process may run on."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline.processes import MOST_WORKERS, usable_cores, worker_count


def test_worker_count_is_the_usable_cores_up_to_the_most() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))
    assert worker_count() == min(usable_cores(), MOST_WORKERS)


def test_a_process_held_to_one_core_takes_one_worker_and_one_shard_process() -> None:
    """A container's cpuset (here `sched_setaffinity`, as `taskset` sets it) leaves a process
    fewer cores than the machine has: its pools take those, not the machine's count."""
    one_core = min(os.sched_getaffinity(0))
    script = (f"import os; os.sched_setaffinity(0, {{{one_core}}}); "
              "from pipeline.processes import worker_count; "
              "from pipeline.operations.stages import shard_workers; "
              "from pipeline.settings import Settings; "
              "print(worker_count(), shard_workers(Settings(probe_shards=4)), os.cpu_count())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    workers, shard_processes, machine = map(int, done.stdout.split()[-3:])
    assert (workers, shard_processes, machine) == (1, 1, os.cpu_count())
