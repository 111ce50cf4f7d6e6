"""TCP keepalives of the store's PostgreSQL connections, both ends from one figure
(APIDIR_STORE_LOCK_KEEPALIVE): neither the server nor a run waits the system's two hours and
more to find its peer's machine died or was cut off. The server's end lets go of a store lock
its holder can no longer use (`locks.store_lock`); the run's end fails a statement that waits
on a server gone, rather than hang the run until its time limit."""

from __future__ import annotations

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


def client_keepalives(seconds: int, given: dict[str, object]) -> dict[str, str]:
    """libpq's connection parameters of the run's end (`keepalive_settings`), but those the
    database URL gives (`given`, its query), which are kept as given."""
    wanted = {"keepalives": "1", **keepalive_settings(seconds, CLIENT_PARAMETERS)}
    return {name: value for name, value in wanted.items() if name not in given}
