"""The bench's fake DNS: every name the prober of a process resolves goes to the loopback
fake internet, as the night's config (`bench.nightly`) says. Its own module, so a probe
shard's process, which the flow's process spawns afresh, installs it from `sitecustomize`
without importing the module that the spawn then runs as its main one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DNS_CONFIG = "APIDIR_BENCH_NIGHT_CONFIG"  # names the night's config in the shards' processes
SHARD_SITE = f"""\
# The bench's fake DNS in a probe shard's process (bench.fake_dns.shard_site).
import os

if os.environ.get("{DNS_CONFIG}"):
    from pathlib import Path

    from bench.fake_dns import install_fake_dns

    install_fake_dns(Path(os.environ["{DNS_CONFIG}"]))
"""


def install_fake_dns(config_file: Path) -> dict[str, Any]:
    """Send every name the prober of this process resolves to the fake internet, as the
    night's config says; the config."""
    from pipeline.probing import netguard
    from tests.fake_internet import FakeDNS

    config = json.loads(config_file.read_text())
    answers: dict[str, list[list[str]] | int] = {}
    for address, names in config["dns"].items():
        answer = [[address]]  # one list shared by the names of an address: less memory
        answers.update((name, answer) for name in names)
    netguard.DefaultResolver = lambda: FakeDNS(answers, port=config["port"])
    return config


def shard_site(workdir: Path) -> Path:
    """A folder whose `sitecustomize` installs the fake DNS in every Python process started
    with it on its path and DNS_CONFIG set: the probe shards' processes, which the flow's
    process spawns afresh, so what it patched in itself is not in them."""
    site = workdir / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SHARD_SITE)
    return site
