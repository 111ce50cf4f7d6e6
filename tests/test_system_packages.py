"""`make system-packages` on a machine missing some of the Debian packages the tests drive: the
real Makefile recipe run by make, with `dpkg-query`, `apt-get`, `systemctl` and `id` stood in
for by scripts that record how they were called (installing packages or stopping services is
not something a test may do to the machine it runs on)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")

# what each stand-in does: dpkg-query says installed only the packages in $INSTALLED
STAND_INS = {
    "dpkg-query": 'case " $INSTALLED " in *" ${@: -1} "*) printf "install ok installed";; '
                  '*) exit 1;; esac',
    "apt-get": 'echo "apt-get $*" >> "$CALLS"',
    "systemctl": 'echo "systemctl $*" >> "$CALLS"',
    "id": "echo 0",
}


def system_packages(tmp_path: Path, installed: str, systemd: bool) -> list[str]:
    """The calls `make system-packages` made, on a machine holding the packages `installed`,
    systemd running or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        script = bin_dir / name
        script.write_text(f"#!/bin/bash\n{body}\n")
        script.chmod(0o755)
    calls = tmp_path / "calls"
    calls.touch()
    systemd_dir = tmp_path / "run-systemd-system"
    if systemd:
        systemd_dir.mkdir()
    done = subprocess.run(
        ["make", "--no-print-directory", "system-packages", f"SYSTEMD_DIR={systemd_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "INSTALLED": installed, "CALLS": str(calls),
             "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


def test_services_the_install_started_are_stopped_and_disabled_where_systemd_runs(
        tmp_path: Path) -> None:
    """nginx (port 80) and PgBouncer (6432) start as services when Debian installs them; the
    tests start their own, so the ones the install started are stopped and disabled. Chromium
    and the fonts start nothing."""
    calls = system_packages(tmp_path, installed="fonts-dejavu-core", systemd=True)
    assert calls == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends nginx chromium pgbouncer",
        "systemctl disable --now nginx pgbouncer",
    ]


def test_a_service_installed_before_is_left_alone(tmp_path: Path) -> None:
    """An nginx the machine had before `make test` may be the machine's own web server: only
    what this install brought is stopped."""
    calls = system_packages(tmp_path, installed="nginx fonts-dejavu-core", systemd=True)
    assert calls[-1] == "systemctl disable --now pgbouncer"
    assert not any("nginx" in call for call in calls)


def test_without_systemd_nothing_is_asked_of_it(tmp_path: Path) -> None:
    """A container without an init system started nothing: no systemctl call (it would fail)."""
    calls = system_packages(tmp_path, installed="", systemd=False)
    assert not any(call.startswith("systemctl") for call in calls)
    assert calls[-1] == ("apt-get install -y -qq --no-install-recommends "
                         "nginx chromium fonts-dejavu-core pgbouncer")


def test_nothing_missing_installs_nothing(tmp_path: Path) -> None:
    calls = system_packages(tmp_path, installed="nginx chromium fonts-dejavu-core pgbouncer",
                            systemd=True)
    assert calls == []
