"""How many worker processes the pools take: one per core this process may run on."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.catalogue.entries import _read_chunk as read_chunk_of_entries
from pipeline.operations.score_parts import present_span
from pipeline.operations.stages import WORKER_MODULES
from pipeline.operations.upkeep import roll_up_night
from pipeline.processes import MOST_WORKERS, usable_cores, worker_count, worker_pool
from pipeline.release.entry_site import write_entry_site
from pipeline.release.validate import _line_problems as line_problems
from tests.conftest import REPO
from tests.worker_side import environment_value


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


def test_a_worker_has_its_pools_environment_as_it_is_when_the_pool_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers forked from a server started before a change to the environment still get the
    environment of the process that makes their pool, as spawned workers did."""
    with worker_pool(1) as pool:  # the server runs from here on
        assert pool.submit(environment_value, "APIDIR_WORKER_PROBE").result() is None
    monkeypatch.setenv("APIDIR_WORKER_PROBE", "set after the server started")
    with worker_pool(1) as pool:
        seen = pool.submit(environment_value, "APIDIR_WORKER_PROBE").result()
    assert seen == "set after the server started"


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                    reason="workers are spawned where there is no forkserver")
def test_warmed_workers_start_with_what_the_stages_run_already_imported() -> None:
    """`stages.warm_workers` imports the stages' worker modules once, into the server their
    workers are forked from; without it a worker starts with none of them."""
    script = ("import sys; {warm}"
              "from pipeline.operations.stages import WORKER_MODULES; "
              "from pipeline.processes import worker_pool; "
              "from tests.worker_side import loaded; "
              "pool = worker_pool(1); "
              "print(','.join(pool.submit(loaded, list(WORKER_MODULES)).result())); "
              "pool.shutdown()")
    found = {}
    for warm in (True, False):
        done = subprocess.run(
            [sys.executable, "-c", script.format(
                warm="from pipeline.operations.stages import warm_workers; warm_workers(); "
                if warm else "")],
            capture_output=True, text=True, check=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        found[warm] = done.stdout.split()[-1] if done.stdout.split() else ""
    assert found[True].split(",") == list(WORKER_MODULES)
    assert found[False] == ""


def test_the_warmed_modules_are_those_whose_work_the_pools_run() -> None:
    """Each pool's work function lives in a module the server imports (`WORKER_MODULES`)."""
    work = [read_chunk_of_entries, present_span, write_entry_site, line_problems, roll_up_night]
    assert sorted({function.__module__ for function in work}) == sorted(WORKER_MODULES)


def test_workers_are_spawned_where_their_server_cannot_start(tmp_path: Path) -> None:
    """The workers' server listens on a socket in the temporary folder; where its path is too
    long for one (a long `TMPDIR`), the run warns in one line and spawns its workers."""
    temporary = tmp_path / ("t" * 120)
    temporary.mkdir()
    script = ("import os; from pipeline.operations.stages import warm_workers; warm_workers(); "
              "from pipeline.processes import worker_pool; pool = worker_pool(1); "
              "print(pool.submit(os.getpid).result(), os.getpid()); pool.shutdown()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stderr[-2000:]
    worker, parent = map(int, done.stdout.split()[-2:])
    assert worker != parent
    warnings = [line for line in done.stderr.splitlines() if "worker processes are spawned" in line]
    assert len(warnings) == 1 and "AF_UNIX path too long" in warnings[0]
    assert "Traceback" not in done.stderr
