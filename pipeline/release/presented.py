"""A published entry with every field of the contract present, for the templates.

The staged entries were dumped from the contract's models (and the whole dataset is validated
before the release is swapped in), so presenting one only adds the fields a dump leaves out,
with the model's defaults: validating every entry again per page would cost more than the rest
of its presentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

_REQUIRED = object()


def _nested_model(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds, and whether as a list of them; None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _nested_model(args[0])
    if origin is list:
        inner = _nested_model(args[0])
        return (inner[0], True) if inner and not inner[1] else None
    if origin in (Union, UnionType):
        return next(filter(None, map(_nested_model, args)), None)
    return None


@cache
def _fields(model: type[BaseModel]) -> tuple[tuple[str, Any, Any], ...]:
    """Each field of `model` as (JSON name, default as JSON or _REQUIRED, nested model)."""
    fields = []
    for name, field in model.model_fields.items():
        if field.is_required():
            default: Any = _REQUIRED
        else:
            value = field.get_default(call_default_factory=True)
            default = (value.model_dump(mode="json") if isinstance(value, BaseModel)
                       else to_jsonable_python(value))
        fields.append((field.serialization_alias or field.alias or name, default,
                       _nested_model(field.annotation)))
    return tuple(fields)


def with_defaults(document: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`document` (a dump of `model`) with every field of it present: the ones it lacks at
    their defaults (null where unset), nested models and lists of them alike.

    Only what changes is copied: a dict or list that already holds every field is handed back
    as it is (an entry's page reads its presented entry and never changes it), and `document`
    itself is never changed."""
    filled: dict[str, Any] | None = None  # the copy, made at the first field that changes
    for key, default, nested in _fields(model):
        if key not in document:
            if default is not _REQUIRED:
                if filled is None:
                    filled = dict(document)
                filled[key] = _copy(default)
            continue
        value = document[key]
        if nested is None or value is None:
            continue
        inner, many = nested
        presented = _each_with_defaults(value, inner) if many else with_defaults(value, inner)
        if presented is not value:
            if filled is None:
                filled = dict(document)
            filled[key] = presented
    if filled is None:
        return document if type(document) is dict else dict(document)
    return filled


def _each_with_defaults(items: list[Any], model: type[BaseModel]) -> list[Any]:
    """A list of dumps of `model` with every field present (`with_defaults`): the list itself
    when no item changed."""
    presented = [with_defaults(item, model) for item in items]
    if all(new is old for new, old in zip(presented, items, strict=True)):
        return items
    return presented


def _copy(default: Any) -> Any:
    """A fresh copy of a JSON default, so no two entries share a list or a dict."""
    if isinstance(default, dict):
        return {key: _copy(value) for key, value in default.items()}
    if isinstance(default, list):
        return [_copy(value) for value in default]
    return default
