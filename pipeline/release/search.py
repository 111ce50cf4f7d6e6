"""The search index (`api/search.json`): each entry cut down to what the index page shows,
searches and sorts by, so the page loads a few hundred bytes an entry, not the whole dataset.

Publishing writes one line per entry with `search_line`, and validation computes the same
line from the full dataset's entry, so the index never says something the dataset does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from pipeline.release.pages import free_only, latency_wanting


def search_item(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A published entry as a SearchItem: its keys that are set, whether it is free alone, the
    state of its status, the grade, percent and provisional flag of its builder score (and, for
    a provisional grade, what its Latency waits for, as a category page's card says it), its
    lifecycle state and successor, whether it is HTTPS and its CORS state."""
    status = entry.get("status") or {}
    score = entry.get("builderScore") or {}
    lifecycle = entry.get("lifecycle") or {}
    item = {
        "id": entry.get("id"),
        "name": entry.get("name"),
        "provider": entry.get("provider"),
        "category": entry.get("category"),
        "description": entry.get("description"),
        "tags": entry.get("tags"),
        "authType": entry.get("authType"),
        "hasFreeTier": entry.get("hasFreeTier"),
        "freeOnly": free_only(entry) or None,  # only a free entry's: nothing for the others
        "color": entry.get("color"),
        "state": status.get("state", "unchecked"),
        "grade": score.get("grade"),
        "percent": score.get("percent"),
        "provisional": score.get("provisional"),
        # only a provisional grade's: nothing for a confirmed one
        "provisionalWhy": latency_wanting(score) if score.get("provisional") else None,
        "lifecycle": lifecycle.get("state"),
        "successor": lifecycle.get("successor"),  # only a deprecated entry's: nothing for others
        "https": (entry.get("https") or {}).get("enabled"),
        "cors": (entry.get("cors") or {}).get("state"),
    }
    return {key: value for key, value in item.items() if value is not None}


def search_line(entry: Mapping[str, Any]) -> bytes:
    """The entry's line of `api/search.json`: compact JSON, sorted keys, UTF-8."""
    return orjson.dumps(search_item(entry), option=orjson.OPT_SORT_KEYS)
