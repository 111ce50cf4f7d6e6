"""The code and the data each state their licence where a reader looks for it."""

from __future__ import annotations

import tomllib

from pipeline.contract import LICENSE
from tests.conftest import REPO


def test_the_code_is_mit_as_the_package_says() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    text = (REPO / "LICENSE").read_text()
    assert declared == "MIT" and text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text


def test_the_data_licence_stands_beside_the_data_and_matches_the_datasets() -> None:
    text = (REPO / "data" / "LICENSE.md").read_text()
    assert LICENSE == "CC BY 4.0"
    assert f"# Data licence: {LICENSE}" in text
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in text
