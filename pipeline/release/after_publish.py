"""The operator's command run each time a release goes live (`APIDIR_AFTER_PUBLISH`): what the
host must be told of a new release, such as `nginx -s reload`, since nginx reads a release's
renamed addresses (`_renamed.map`) only as it loads, or a CDN purge. It runs under the publish
lock, so two publishers' commands never overlap, and it is bounded, so a command that hangs
cannot hold the lock."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path

AFTER_PUBLISH_SECONDS = 60.0  # what a reload or a purge takes, with room to spare
TAIL_BYTES = 4096  # of the command's output, read to tell a failure by its last line
SETTING = "APIDIR_AFTER_PUBLISH"


class AfterPublishFailed(RuntimeError):
    """The after-publish command failed: told in one line naming it and why, and that the new
    release is live (it went live before the command ran)."""


def run_after_publish(output_dir: Path, command: str) -> None:
    """Run `command` (none where it is blank) with the output folder in `APIDIR_PUBLISHED`, its
    output read only to tell a failure; raise AfterPublishFailed unless it exits with 0
    within `AFTER_PUBLISH_SECONDS`. It runs in a session of its own, so a command that outlives its
    time is stopped with whatever it started."""
    words = shlex.split(command)
    if not words:
        return
    with tempfile.TemporaryFile() as output:  # however much it writes, none of it is held
        try:
            process = subprocess.Popen(
                words, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env={**os.environ, "APIDIR_PUBLISHED": str(output_dir)},
                start_new_session=True)
        except OSError as error:  # not found, not executable
            raise _failed(output_dir, command, error.strerror or str(error)) from None
        try:
            process.wait(timeout=AFTER_PUBLISH_SECONDS)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):  # it ended, and what it started, just now
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise _failed(output_dir, command,
                          f"it did not finish within {AFTER_PUBLISH_SECONDS:g} s and was "
                          "stopped") from None
        if process.returncode == 0:
            return
        output.seek(max(0, output.seek(0, os.SEEK_END) - TAIL_BYTES))
        said = _last_line(output.read())
    status = (f"killed by signal {-process.returncode}" if process.returncode < 0
              else f"exit status {process.returncode}")
    raise _failed(output_dir, command, f"{status}{': ' + said if said else ''}")


def _failed(output_dir: Path, command: str, why: str) -> AfterPublishFailed:
    return AfterPublishFailed(
        f"the new release is live at {output_dir}, but the command {SETTING} names "
        f"({command.strip()}) failed: {why}")


def _last_line(output: bytes, limit: int = 300) -> str:
    """The command's last line of output, cut to `limit` characters: what it said last is
    what says why, and a line is all a failure is told in."""
    lines = [line.strip() for line in output.decode(errors="replace").splitlines()]
    said = next((line for line in reversed(lines) if line), "")
    return said if len(said) <= limit else said[: limit - 1] + "…"
