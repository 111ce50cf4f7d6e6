"""The README's reference tables against the product: every setting in the configuration
table with its default, every command and option in the command table. A setting or option
added without its line would otherwise go unseen by every user who reads the README."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer.main
from sqlmodel import Session
from typer.testing import CliRunner

from pipeline import contract
from pipeline.cli import app
from pipeline.settings import Settings
from pipeline.store.locks import (
    SQLITE_COMMIT,
    StoreWork,
    _timeout_line,
    commit_named,
    holder_named,
)
from pipeline.store.tables import PipelineRun, make_engine
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
CONTRIBUTING = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    """The README's text under the `## title` heading, up to the next one."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in `text` (header and rule left out)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| ") or set(line) <= set("|- "):
            continue
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return [row for row in rows if row[0] not in ("variable", "command")]


def shown(default: Any) -> str:
    """A setting's default as the configuration table writes it."""
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def test_every_setting_is_in_the_configuration_table_with_its_default() -> None:
    rows = table_rows(section("Configuration"))
    documented = {row[0].strip("`"): row[1] for row in rows}
    assert len(rows) == len(documented)  # each setting on one line
    expected = {f"APIDIR_{name.upper()}": ("unset" if field.default is None
                                           else f"`{shown(field.default)}`")
                for name, field in Settings.model_fields.items()}
    assert sorted(expected.keys() - documented.keys()) == []  # settings the table lacks
    assert sorted(documented.keys() - expected.keys()) == []  # lines of no setting
    assert {name: documented[name] for name in expected} == expected


DOCS = {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
# A default said beside a setting's name in prose, "`APIDIR_STALE_DAYS` (180)", "(default 10 s)",
# with its unit: the value the setting holds is the number times the unit.
SAID_DEFAULT = re.compile(r"`APIDIR_([A-Z0-9_]+)` \((?:default )?(\d[\d,]*(?:\.\d+)?)"
                          r"(?: (KiB|MiB|s|seconds|hours?|days?))?\)")
UNITS = {None: 1, "s": 1, "seconds": 1, "days": 1, "day": 1, "KiB": 1024, "MiB": 1024 ** 2,
         "hour": 3600, "hours": 3600}


def test_every_apidir_variable_the_docs_name_is_read_by_the_code() -> None:
    """A name the docs give that is no setting (nor one of the few variables read directly,
    such as APIDIR_DEBUG) would be set by an operator to no effect, with no word said."""
    settings = {f"APIDIR_{name.upper()}" for name in Settings.model_fields}
    readers = [REPO / "tests" / "conftest.py",  # the test store's PostgreSQL server
               *(path for folder in ("pipeline", "flows", "bench")
                 for path in (REPO / folder).rglob("*.py"))]
    sources = "\n".join(path.read_text(encoding="utf-8") for path in readers)
    unknown = {f"{doc}: {name}" for doc, text in DOCS.items()
               for name in re.findall(r"APIDIR_[A-Z0-9_]*[A-Z0-9]", text)
               if name not in settings and f'"{name}"' not in sources}
    assert sorted(unknown) == []


def test_a_default_the_docs_say_beside_a_setting_is_its_default() -> None:
    said = [(doc, match) for doc, text in DOCS.items() for match in SAID_DEFAULT.finditer(text)]
    assert len(said) > 5  # the pattern still finds the defaults the docs say
    wrong = []
    for doc, match in said:
        name, number, unit = match.groups()
        field = Settings.model_fields[name.lower()]
        if float(number.replace(",", "")) * UNITS[unit] != field.default:
            wrong.append(f"{doc}: {match.group(0)}, but its default is {field.default}")
    for doc, text in DOCS.items():  # other tables of settings, as the configuration table's
        for row in table_rows(text):
            name = row[0].strip("`")
            if name.startswith("APIDIR_") and len(row) > 1 and name != row[0]:
                field = Settings.model_fields[name.removeprefix("APIDIR_").lower()]
                expected = "unset" if field.default is None else f"`{shown(field.default)}`"
                if row[1].split(" (")[0] != expected:
                    wrong.append(f"{doc}: {name} | {row[1]}, but its default is {expected}")
    assert wrong == []


def commands(group: Any, path: tuple[str, ...] = ("apidir",)) -> Iterator[tuple[str, Any]]:
    """Every command of the `apidir` app with its full name (`apidir db current`)."""
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None):
            yield from commands(command, (*path, name))
        elif not command.hidden:
            yield " ".join((*path, name)), command


COMMANDS = dict(commands(typer.main.get_group(app)))


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_and_option_is_in_the_command_table(name: str) -> None:
    rows = [row for row in table_rows(section("The `apidir` command"))
            if re.search(rf"`{re.escape(name)}(`| )", row[0])]
    assert rows, f"{name} is not in the README's command table"
    options = [option for param in COMMANDS[name].params if param.param_type_name == "option"
               for option in param.opts if option.startswith("--")]
    assert [option for option in options if not any(option in row[0] for row in rows)] == []


def test_probe_help_says_a_failed_url_has_a_second_json_line() -> None:
    outcome = CliRunner().invoke(app, ["probe", "--help"], terminal_width=200)
    assert '"confirmation": true' in " ".join(outcome.output.split())


def test_the_readme_shows_make_run_and_make_test_as_the_way_in() -> None:
    """The README's first block is the way in: two commands, nothing else to learn first."""
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make run", "make test"]


def published_fields(model: type[contract.ContractModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_the_fields_the_readme_lists_are_those_the_contract_publishes() -> None:
    """The README lists an object's keys as `{a, b, …}` and the change log's in its files table;
    a field added to the contract and not to these lists goes unseen by consumers."""
    models = [published_fields(model) for model in vars(contract).values()
              if isinstance(model, type) and issubclass(model, contract.ContractModel)]
    listed = [set(re.split(r",\s*", " ".join(keys.split())))
              for keys in re.findall(r"`\{([A-Za-z0-9 \n]+,[A-Za-z0-9, \n]+)\}`", README)]
    assert len(listed) > 10  # the pattern still finds the lists
    assert [keys for keys in listed if keys not in models] == []
    row = next(line for line in README.splitlines()
               if line.startswith("| `public/api/changes.json`"))
    changes, events = (set(re.findall(r"`(\w+)`", part))
                       for part in re.findall(r"\(`(?:changes|events)`: ([^)]*)\)", row))
    assert changes == published_fields(contract.StateChangeItem)
    assert events == published_fields(contract.CatalogueEvent)


# Where a problem's rule is written in the catalogue's code: the argument of these calls at this
# place, each rule a literal where the problem is found (there is no list of them to import).
RULE_ARGUMENT = {"Problem": 4, "YamlProblem": 2, "problem": 1, "UnsafeEntryFile": 0}


def catalogue_rules() -> set[str]:
    """Every rule `validate` can name, read from the catalogue's source: the schema's (what
    `_rule_of` makes of pydantic's errors), the file limits', the YAML reader's, and data lint's
    (each lint problem is yielded as `(field, rule, message)`)."""
    rules = set()
    for path in (REPO / "pipeline" / "catalogue").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                place = RULE_ARGUMENT.get(name or "", len(node.args))
                rules.update(arg.value for arg in node.args[place:place + 1]
                             if isinstance(arg, ast.Constant))
            elif isinstance(node, ast.FunctionDef) and node.name == "_rule_of":
                rules.update(constant.value for constant in ast.walk(node)
                             if isinstance(constant, ast.Constant)
                             and re.fullmatch(r"[a-z]+(-[a-z]+)+", str(constant.value)))
            elif (path.name == "lint.py" and isinstance(node, ast.Yield)
                  and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 3
                  and isinstance(node.value.elts[1], ast.Constant)):
                rules.add(node.value.elts[1].value)
    return rules


def test_every_rule_validate_names_is_in_the_contributing_guide() -> None:
    """`validate` names a problem's rule in brackets; a contributor looks it up in the guide."""
    rules = catalogue_rules()
    assert {"missing-required-field", "too-large", "yaml-syntax", "real-credential",
            "sample-request-curl"} <= rules  # the reading above still finds each kind
    assert sorted(rule for rule in rules if f"`{rule}`" not in CONTRIBUTING) == []


def test_the_store_lock_s_timeout_lines_the_readme_quotes_are_the_code_s(
    tmp_path: Path,
) -> None:
    """An operator looks up the line a run failed with: the README quotes the store lock's
    timeout as the code says it, with each holder it may name (a run, a commit under way)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'apidir.db'}")
    try:
        with Session(engine) as session:
            session.add(PipelineRun(id=12, flow="nightly", host="worker-1", pid=4242,
                                    started_at=datetime(2026, 11, 30, 2, tzinfo=UTC)))
            session.commit()
        run, commit = holder_named(engine, 12), commit_named(engine, 12)
        previous = commit_named(engine, None)
    finally:
        engine.dispose()
    text = " ".join(README.split())  # the README's lines wrap anywhere
    quoted = [_timeout_line(StoreWork.ingest, run, 3600), commit, previous, SQLITE_COMMIT]
    assert [line for line in quoted if f"`{line}`" not in text] == []


def make_dry_run(target: str) -> list[str]:
    """The words of the commands `make TARGET` would run (nothing is run)."""
    done = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_clean_keeps_the_store_and_the_release_and_make_lint_runs_ruff() -> None:
    """`make clean` removed `var` and `public`: the default store with every night's history
    and the published release, which no command rebuilds."""
    words = make_dry_run("clean")
    assert "rm" in words
    assert {"var", "var/", "var/apidir.db", "var/prefect", "public", "public/"}.isdisjoint(words)
    assert "ruff" in " ".join(make_dry_run("lint"))
