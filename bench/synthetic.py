"""Synthetic catalogues: N valid entry files shaped like the curated ones.

Every synthetic entry is one of the real entries of its category with a new id,
name and API host, so field sizes (descriptions, pricing, endpoints, samples)
follow the curated catalogue. Categories follow `CATEGORY_MIX`, a skewed mix
(the largest category 8.5 % of the entries, the smallest 6 %).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import yaml

# Share of the catalogue per category, in percent (sums to 100).
CATEGORY_MIX: dict[str, float] = {
    "developer": 8.5,
    "ai": 8.5,
    "communication": 8.0,
    "payments": 8.0,
    "ecommerce": 7.5,
    "finance": 7.5,
    "storage": 7.0,
    "search": 7.0,
    "security": 6.5,
    "social": 6.5,
    "maps": 6.5,
    "entertainment": 6.5,
    "auth": 6.0,
    "weather": 6.0,
}


def _templates(data_dir: Path) -> dict[str, list[tuple[str, str, str, str]]]:
    """(id, name, API host, file text) of every curated entry, by category."""
    by_category: dict[str, list[tuple[str, str, str, str]]] = defaultdict(list)
    for path in sorted((data_dir / "entries").rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
        host = urlsplit(raw["baseUrl"]).netloc
        if "YOUR_" in raw["baseUrl"]:
            continue  # a per-account address has no host to give each copy its own
        by_category[raw["category"]].append((raw["id"], raw["name"], host, text))
    return by_category


def _renamed(text: str, old_id: str, new_id: str, new_name: str, old_host: str,
             new_host: str) -> str:
    text = re.sub(rf"^id: {re.escape(old_id)}$", f"id: {new_id}", text, count=1, flags=re.M)
    quoted = json.dumps(new_name)  # a JSON string is a YAML double-quoted scalar
    text = re.sub(r"^name: .*$", lambda _m: f"name: {quoted}", text, count=1, flags=re.M)
    # The API host appears in baseUrl and the sample request, which must agree.
    return text.replace(f"//{old_host}", f"//{new_host}")


def category_counts(count: int) -> dict[str, int]:
    """How many entries of each category a catalogue of `count` entries holds."""
    counts = {category: int(count * share / 100) for category, share in CATEGORY_MIX.items()}
    names = list(CATEGORY_MIX)
    for index in range(count - sum(counts.values())):
        counts[names[index % len(names)]] += 1
    return counts


def api_host(serial: int) -> str:
    """The API host of the `serial`-th synthetic entry (counted from 1): one host per entry."""
    return f"api-{serial:06d}.example.net"


def write_catalogue(data_dir: Path, target: Path, count: int, seed: int = 1) -> dict[str, int]:
    """Write `target/categories.yaml` and `count` entry files under `target/entries/`."""
    rng = random.Random(seed)
    templates = _templates(data_dir)
    if target.exists():
        shutil.rmtree(target)
    (target / "entries").mkdir(parents=True)
    shutil.copy(data_dir / "categories.yaml", target / "categories.yaml")
    counts = category_counts(count)
    serial = 0
    for category, wanted in counts.items():
        folder = target / "entries" / category
        folder.mkdir()
        for _ in range(wanted):
            serial += 1
            old_id, old_name, old_host, text = rng.choice(templates[category])
            new_id = f"{old_id}-{serial:06d}"
            text = _renamed(text, old_id, new_id, f"{old_name} {serial}", old_host,
                            api_host(serial))
            (folder / f"{new_id}.yaml").write_text(text, encoding="utf-8")
    return counts
