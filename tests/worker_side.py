"""What the process tests run inside worker processes: a module that imports nothing of the
pipeline, so a worker holds only what its server or its pool gave it."""

from __future__ import annotations

import os
import sys


def loaded(names: list[str]) -> list[str]:
    """Of `names`, the modules this worker process holds."""
    return [name for name in names if name in sys.modules]


def environment_value(name: str) -> str | None:
    """An environment variable as this worker process sees it."""
    return os.environ.get(name)
