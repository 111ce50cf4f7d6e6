"""Run-time settings: embedded defaults, overridden by `APIDIR_*` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything runs with no configuration; each field is `APIDIR_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="APIDIR_", extra="ignore")

    data_dir: Path = Field(
        default=Path("data"), description="Curated input: categories and entries."
    )
    database_url: str = Field(
        default="sqlite:///var/apidir.db", description="SQLAlchemy URL of the store."
    )
    output_dir: Path = Field(
        default=Path("public"), description="Folder the release is published to."
    )
    base_url: str = Field(
        default="http://localhost:8000",
        description="Address the output folder is served from; used in meta.source.",
    )

    @property
    def entries_dir(self) -> Path:
        return self.data_dir / "entries"

    @property
    def categories_file(self) -> Path:
        return self.data_dir / "categories.yaml"
