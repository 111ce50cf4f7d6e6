"""A published entry with every field of the contract present, for the templates.

The staged entries were dumped from the contract's models (and the whole dataset is validated
before the release is swapped in), so presenting one only adds the fields a dump leaves out,
with the model's defaults: validating every entry again per page would cost more than the rest
of its presentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from operator import is_
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


@cache
def _shape(model: type[BaseModel]) -> tuple[
        frozenset[str], tuple[tuple[str, Any], ...], tuple[tuple[str, type[BaseModel], bool], ...]]:
    """`model`'s fields as `with_defaults` reads them: every JSON name, the defaults in field
    order, and the fields that hold a model (or a list of them)."""
    fields = _fields(model)
    return (frozenset(key for key, _, _ in fields),
            tuple((key, default) for key, default, _ in fields if default is not _REQUIRED),
            tuple((key, *nested) for key, _, nested in fields if nested is not None))


def with_defaults(document: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """`document` (a dump of `model`) with every field of it present: the ones it lacks at
    their defaults (null where unset), nested models and lists of them alike.

    Only what changes is copied, and only the fields that hold a model are looked into: a dict
    or list that holds every field already is handed back as it is (an entry's page reads its
    presented entry and never changes it), and `document` itself is never changed."""
    names, defaults, nested = _shape(model)
    filled: dict[str, Any] | None = None  # the copy, made at the first field that changes
    if not document.keys() >= names:
        filled = dict(document)
        for key, default in defaults:
            if key not in filled:
                filled[key] = _copy(default)
    for key, inner, many in nested:
        value = document.get(key)
        if value is None:
            continue
        if many:
            presented: Any = [with_defaults(item, inner) for item in value]
            if all(map(is_, presented, value)):
                continue
        else:
            presented = with_defaults(value, inner)
            if presented is value:
                continue
        if filled is None:
            filled = dict(document)
        filled[key] = presented
    if filled is None:
        return document if type(document) is dict else dict(document)
    return filled


def _copy(default: Any) -> Any:
    """A fresh copy of a JSON default, so no two entries share a list or a dict."""
    if isinstance(default, dict):
        return {key: _copy(value) for key, value in default.items()}
    if isinstance(default, list):
        return [_copy(value) for value in default]
    return default
