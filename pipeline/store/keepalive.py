"""TCP keepalives of the store's PostgreSQL connections, both ends from one figure
(APIDIR_STORE_LOCK_KEEPALIVE): neither the server nor a run waits the system's two hours and
more to find its peer's machine died or was cut off. The server's end lets go of a store lock
its holder can no longer use (`locks.store_lock`), and of a commit's backend, which holds the
lock's fence the next holder waits for; the run's end fails a statement that waits on a server
gone, rather than hang the run until its time limit."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

KEEPALIVE_PROBES = 3  # unanswered TCP keepalive probes before a peer is given up
# The server's settings of a session, and libpq's connection parameters, of the same four.
SERVER_SETTINGS = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                   "tcp_user_timeout")
CLIENT_PARAMETERS = ("keepalives_idle", "keepalives_interval", "keepalives_count",
                     "tcp_user_timeout")


def keepalive_settings(seconds: int,
                       names: tuple[str, ...] = SERVER_SETTINGS) -> dict[str, str]:
    """TCP settings (`names`: the server's or the client's) by which a peer whose machine
    stopped answering is given up within `seconds`: probed after a quarter of them idle, then
    a probe each quarter, given up after the third unanswered; and no sent data waits
    unacknowledged longer than all of them (`tcp_user_timeout`, ms)."""
    beat = str(max(1, seconds // 4))
    return dict(zip(names, (beat, beat, str(KEEPALIVE_PROBES), str(seconds * 1000)),
                    strict=True))


# A server setting a libpq `options` string gives: `-c name=value`, `-cname=value` or
# `--name=value`, a dash in its name read as an underscore, as the server reads it.
_OPTION = re.compile(r"(?:^|\s)(?:-c\s*|--)([\w.-]+)=")


def connection_keepalives(seconds: int, given: Mapping[str, object]) -> dict[str, str]:
    """libpq's connection parameters of both ends of every connection (`keepalive_settings`):
    the run's end, and the server's, set for the session from its start by `options` (so a
    commit's connection carries them as the lock's does, and a RESET comes back to them).
    What the operator gives is kept as given: a parameter the database URL (`given`, its
    query) names, and a server setting its `options`, else PGOPTIONS, sets; ours are added
    after those options, which `options` would otherwise replace."""
    wanted = {"keepalives": "1", **keepalive_settings(seconds, CLIENT_PARAMETERS)}
    parameters = {name: value for name, value in wanted.items() if name not in given}
    options = given.get("options", os.environ.get("PGOPTIONS", ""))
    options = " ".join(options) if isinstance(options, tuple) else str(options)
    named = {name.replace("-", "_").lower() for name in _OPTION.findall(options)}
    added = [f"-c {name}={value}" for name, value in keepalive_settings(seconds).items()
             if name not in named]
    if added:
        parameters["options"] = " ".join([options, *added]).strip()
    return parameters
