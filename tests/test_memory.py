"""A stage's freed memory goes back to the system when it ends, so the flow's next stage does
not start on top of its high-water mark. Measured in a fresh interpreter: the resident set of
this test process depends on every test before it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# A stage that allocates ~200 MiB in blocks glibc serves from its heap and keeps one block, the
# last, alive: every freed page lies below a block in use, so free() alone returns none of it.
MEASURE = """
import asyncio, json, re
from pathlib import Path
from pipeline.operations.runs import run_stage

kept = []

def rss_mib():
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\\s+(\\d+)", status).group(1)) / 1024

async def stage():
    blocks = [bytes(4096) for _ in range(50_000)]
    kept.append(blocks[-1])
    return len(blocks)

figures = {}
for how, call in (("awaited", lambda: stage()), ("as a stage", lambda: run_stage("x", stage()))):
    before = rss_mib()
    asyncio.run(call())
    figures[how] = rss_mib() - before
print(json.dumps(figures))
"""


def test_a_stage_hands_back_the_memory_it_freed() -> None:
    done = subprocess.run([sys.executable, "-c", MEASURE], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)
    grown = json.loads(done.stdout.splitlines()[-1])
    assert grown["awaited"] > 150, grown  # freed, yet still resident: the case to mend
    # the stage reused those pages, then every free page went back: the first's ~200 MiB too
    assert grown["as a stage"] < -150, grown
