"""Errors a user can cause with the store, the settings, the dates or the terminal end in one
line naming what is wrong and where (exit status 2), never an unexpected error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.test_cli_errors import apidir, one_line


def store_of_a_newer_version(settings_env: dict[str, str], tmp_path: Path) -> str:
    """A SQLite store a newer version wrote (schema revision 0099); its URL."""
    assert apidir("db", "upgrade", env=settings_env).returncode == 0
    database = tmp_path / "var" / "apidir.db"
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099'")
    connection.close()
    return settings_env["APIDIR_DATABASE_URL"]


@pytest.mark.parametrize(("command", "extra"), [
    (["db", "current"], {}), (["db", "upgrade"], {}), (["db", "downgrade", "0001"], {}),
    (["publish"], {}), (["publish"], {"APIDIR_DATABASE_UPGRADE": "check"})])
def test_a_store_of_a_newer_version_says_so_in_one_line(
    tmp_path: Path, data_dir: Path, command: list[str], extra: dict[str, str]
) -> None:
    from pipeline.store.migrate import head_revision

    env = {"APIDIR_DATA_DIR": str(data_dir), "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
           "APIDIR_BASE_URL": "https://directory.test",
           "APIDIR_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'apidir.db'}"}
    url = store_of_a_newer_version(env, tmp_path)
    done = apidir(*command, env=env | extra)
    assert done.returncode == 2
    line = one_line(done)
    assert line == (
        f"apidir: the store {url} has schema revision 0099, which this version does not know "
        f"(it knows 0001 to {head_revision()}): a newer version wrote it; install that "
        f"version, or take the store back to {head_revision()} with that version's "
        f"`apidir db downgrade {head_revision()}`")
    assert "db upgrade" not in line
