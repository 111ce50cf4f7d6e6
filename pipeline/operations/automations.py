"""The Prefect automations of `deploy/prefect/automations.yaml`, applied to a Prefect server:
the alert webhook saved as a Webhook block, block names resolved to ids, each automation
created anew (one of the same name is replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml
from prefect import get_client
from prefect.blocks.webhook import Webhook
from prefect.events.schemas.automations import AutomationCore
from prefect.settings import PREFECT_API_URL

from pipeline.operations.runs import webhook_url
from pipeline.settings import Settings

WEBHOOK_BLOCK = "apidir-alert-webhook"


class AutomationError(ValueError):
    """The automations cannot be applied as asked (no webhook, a bad definition)."""


def load_definitions(path: Path) -> list[dict[str, Any]]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        definitions = list(document["automations"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise AutomationError(f"{path}: no automations list: {exc}") from exc
    return definitions


def resolve(definition: dict[str, Any], blocks: dict[str, str],
            within: float | None = None) -> AutomationCore:
    """One automation with its actions' block names replaced by the blocks' ids (and, for a
    test or a tighter watch, its trigger's window replaced by `within` seconds)."""
    definition = dict(definition)
    actions = []
    for action in definition.get("actions", []):
        action = dict(action)
        name = action.pop("block", None)
        if name is not None:
            action["block_document_id"] = blocks[name]
        actions.append(action)
    definition["actions"] = actions
    if within is not None:
        definition["trigger"] = dict(definition["trigger"], within=within)
    try:
        return AutomationCore.model_validate(definition)
    except ValueError as exc:
        raise AutomationError(f"automation {definition.get('name')!r}: {exc}") from exc


async def apply_automations(path: Path, settings: Settings,
                            within: float | None = None) -> list[str]:
    """Save the webhook block, then create every automation of `path`; their names. A server
    that cannot be reached is an AutomationError naming PREFECT_API_URL: the client's own
    words ("All connection attempts failed") name no address."""
    try:
        return await _apply(path, settings, within)
    except httpx.TransportError as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise AutomationError(f"the Prefect server at {PREFECT_API_URL.value()} "
                              f"(PREFECT_API_URL) cannot be reached: {why}") from exc


async def _apply(path: Path, settings: Settings, within: float | None) -> list[str]:
    url = await webhook_url(settings)
    if not url:
        raise AutomationError(
            "no alert webhook: set APIDIR_ALERT_WEBHOOK_URL or save the Prefect Secret block "
            f"{settings.alert_webhook_secret or WEBHOOK_BLOCK!r}")
    definitions = load_definitions(path)
    block = Webhook(method="POST", url=url, headers={"Content-Type": "application/json"})
    block_id = await block.asave(WEBHOOK_BLOCK, overwrite=True)
    automations = [resolve(d, {WEBHOOK_BLOCK: str(block_id)}, within) for d in definitions]
    async with get_client() as client:
        for automation in automations:
            for existing in await client.read_automations_by_name(automation.name):
                await client.delete_automation(existing.id)
            await client.create_automation(automation)
    return [automation.name for automation in automations]
