"""The README's reference tables against the product: every setting in the configuration
table with its default. A setting added without its line would otherwise go unseen by every
user who reads the README."""

from __future__ import annotations

from typing import Any

from pipeline.settings import Settings
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


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
    documented = {row[0].strip("`"): row[1] for row in table_rows(section("Configuration"))}
    expected = {f"APIDIR_{name.upper()}": ("unset" if field.default is None
                                           else f"`{shown(field.default)}`")
                for name, field in Settings.model_fields.items()}
    assert sorted(expected.keys() - documented.keys()) == []  # settings the table lacks
    assert sorted(documented.keys() - expected.keys()) == []  # lines of no setting
    assert {name: documented[name] for name in expected} == expected

