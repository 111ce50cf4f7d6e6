"""The Prefect automations of `deploy/prefect/automations.yaml`, applied to a Prefect server:
the alert webhook saved as a Webhook block, block names resolved to ids, each automation
created anew (one of the same name is replaced). Without a webhook, those that call it are
skipped and the others applied: the shard watch needs none."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from prefect import get_client
from prefect.blocks.webhook import Webhook
from prefect.events.schemas.automations import AutomationCore

from pipeline.operations.runs import prefect_unreachable, webhook_url
from pipeline.settings import Settings

WEBHOOK_BLOCK = "apidir-alert-webhook"
WINDOW = "{window}"  # in an action's text: the trigger's window in words (`window_words`)


class AutomationError(ValueError):
    """The automations cannot be applied as asked (no webhook, a bad definition)."""


@dataclass(frozen=True)
class AppliedAutomations:
    """The automations created, and those skipped for want of the alert webhook."""

    applied: list[str]
    skipped: list[str]


def load_definitions(path: Path) -> list[dict[str, Any]]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        definitions = list(document["automations"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise AutomationError(f"{path}: no automations list: {exc}") from exc
    return definitions


def needs_webhook(definition: dict[str, Any]) -> bool:
    """Whether an action of the automation calls the alert webhook's block."""
    return any(action.get("block") == WEBHOOK_BLOCK for action in definition.get("actions", []))


def missing_webhook_hint(settings: Settings) -> str:
    """How to give the automations their webhook, in the words of the settings."""
    secret = settings.alert_webhook_secret
    where = f" or save the Prefect Secret block {secret!r}" if secret else ""
    return f"set APIDIR_ALERT_WEBHOOK_URL{where}, then run `apidir automations apply` again"


def window_words(seconds: object) -> str:
    """A trigger's window as its actions' messages say it: "26 hours", "10 minutes", "45 s"."""
    if not isinstance(seconds, int | float) or seconds <= 0:
        return "its window"
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"


def resolve(definition: dict[str, Any], blocks: dict[str, str],
            within: float | None = None) -> AutomationCore:
    """One automation with its actions' block names replaced by the blocks' ids (and, for a
    test or a tighter watch, its trigger's window replaced by `within` seconds), and `{window}`
    in its actions' text by that window in words: a message names the window that fired."""
    definition = dict(definition)
    trigger = definition.get("trigger")
    if within is not None and isinstance(trigger, dict):
        definition["trigger"] = trigger = dict(trigger, within=within)
    window = window_words(trigger.get("within") if isinstance(trigger, dict) else None)
    actions = []
    for action in definition.get("actions", []):
        if not isinstance(action, dict):  # not an action: the validation below names it
            actions.append(action)
            continue
        action = {key: value.replace(WINDOW, window) if isinstance(value, str) else value
                  for key, value in action.items()}
        name = action.pop("block", None)
        if name is not None:
            action["block_document_id"] = blocks[name]
        actions.append(action)
    definition["actions"] = actions
    try:
        return AutomationCore.model_validate(definition)
    except ValueError as exc:
        raise AutomationError(f"automation {definition.get('name')!r}: {exc}") from exc


async def apply_automations(path: Path, settings: Settings,
                            within: float | None = None) -> AppliedAutomations:
    """Save the webhook block, then create every automation of `path` (without a webhook,
    every one that does not call it). A server that cannot be reached is an AutomationError
    naming PREFECT_API_URL: the client's own words ("All connection attempts failed") name no
    address."""
    try:
        return await _apply(path, settings, within)
    except httpx.TransportError as exc:
        raise AutomationError(prefect_unreachable(exc)) from exc


async def _apply(path: Path, settings: Settings, within: float | None) -> AppliedAutomations:
    definitions = load_definitions(path)
    url = await webhook_url(settings)
    blocks: dict[str, str] = {}
    skipped = []
    if url:
        block = Webhook(method="POST", url=url, headers={"Content-Type": "application/json"})
        blocks[WEBHOOK_BLOCK] = str(await block.asave(WEBHOOK_BLOCK, overwrite=True))
    else:
        skipped = [str(d.get("name")) for d in definitions if needs_webhook(d)]
        definitions = [d for d in definitions if not needs_webhook(d)]
    automations = [resolve(d, blocks, within) for d in definitions]
    async with get_client() as client:
        for automation in automations:
            for existing in await client.read_automations_by_name(automation.name):
                await client.delete_automation(existing.id)
            await client.create_automation(automation)
    return AppliedAutomations([automation.name for automation in automations], skipped)
