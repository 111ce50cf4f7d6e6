"""Macros whose output is balanced by construction, read once from their template.

An entry's page spliced each night has its nightly parts drawn by macros of autoescaped
templates, over values of the entry's JSON. Escaping keeps every `<`, `>`, `"` and `'` of
those values out of the markup, so the tags of a part are the template's own, along the
branches it took. When every branch of every `if` and the body of every `for` of a macro is
balanced on its own, or is text without any tag, its output balances for any entry: its
parts need no tag walk, only a look for links (`entry_site`). A macro not read so (a block
whose tags span a branch, a value that is not plain text, a node not known here) is checked
whole at each draw, as before.

The values a macro prints must be text: the entry's (dicts, lists, strings and numbers
from JSON), the results of the templates' own filters and functions; a call of a macro
proven so, or its markup passed in (a card's badges); the trend chart (`|safe`), drawn from
numbers alone and checked by its own tests.

A category page's cards are drawn by a macro proven so: the page is checked without them, and
each card is read for its links alone (`entry_site`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from jinja2 import Environment, nodes
from jinja2.runtime import Macro

from pipeline.release.pages import _TAG, _balanced_links, environment

# A value printed: escaped text, never a tag, a quote or a closing `>`.
_VALUE = "\x01"
# A part balanced on its own (a proven branch, a macro, the trend chart): one comment token.
_UNIT = "<!--\x02-->"
# Filters whose results are plain text, escaped when printed (the pages' own, and Jinja's
# that never make markup of text).
_TEXT_FILTERS = frozenset(("lower", "upper", "length", "default", "string", "int", "join"))
# Printed with `|safe`, checked by the tests of the code that draws it (`pages.trend_svg`).
_CHECKED_ELSEWHERE = frozenset(("trend",))
# Arguments that hold markup drawn by a macro proven here, printed as it is: a card's badges
# (`pages.card_html` is given `pages.entry_badges`, whose macro its page's check proves).
_PROVEN_ARGUMENTS = frozenset(("badges",))
# Attributes that hold a link (`pages._LINK_NAMES`), as the templates spell them (and as
# `links_possible` looks for them, without a loop: it reads every nightly part).
LINK_ATTRIBUTES = ("href", "src", "data-source")


class _Unproven(Exception):
    """A part of a macro whose tags are not known from the template alone."""


class _Template:
    """The macros of one template, each read at most once (`proven`)."""

    def __init__(self, env: Environment, name: str) -> None:
        self.env = env
        tree = env.parse(env.loader.get_source(env, name)[0]) if env.loader else nodes.Template([])
        self.defined = {macro.name: macro for macro in tree.find_all(nodes.Macro)}
        # An imported macro stands for its template's: proven there or not at all.
        self.imported: dict[str, bool] = {}
        for found in tree.find_all(nodes.FromImport):
            if not isinstance(found.template, nodes.Const):
                continue
            there = _proven(env, found.template.value)
            for imported in found.names:
                source, alias = (imported, imported) if isinstance(imported, str) else imported
                self.imported[alias] = source in there
        self.results: dict[str, bool] = {}

    def proven(self, name: str) -> bool:
        """Whether the macro `name` (defined or imported here) balances for any text."""
        if name in self.imported:
            return self.imported[name]
        if name not in self.defined:
            return False
        if name not in self.results:
            self.results[name] = False  # a macro that calls itself is not proven
            try:
                skeleton = self.skeleton(self.defined[name].body)
            except _Unproven:
                return False
            self.results[name] = _whole(skeleton) and all(
                skeleton.count(link) == skeleton.lower().count(link) for link in LINK_ATTRIBUTES)
        return self.results[name]

    def is_macro(self, expression: nodes.Expr) -> bool:
        return isinstance(expression, nodes.Name) and (
            expression.name in self.defined or expression.name in self.imported)

    def is_text(self, expression: nodes.Expr) -> bool:
        """Whether an expression's value is plain text (escaped when printed), never markup:
        no filter but the text filters, no call but of the environment's plain functions."""
        kinds = (nodes.Filter, nodes.Call, nodes.MarkSafe, nodes.MarkSafeIfAutoescape)
        found_in = [expression] if isinstance(expression, kinds) else []
        for found in [*found_in, *expression.find_all(kinds)]:
            if isinstance(found, nodes.Filter):
                if found.name not in _text_filters():
                    return False
            elif isinstance(found, nodes.Call):
                if not isinstance(found.node, nodes.Name) or self.is_macro(found.node):
                    return False
                function = self.env.globals.get(found.node.name)
                if not callable(function) or isinstance(function, Macro):
                    return False
            else:
                return False
        return True

    def is_unit(self, child: nodes.Expr) -> bool:
        """Whether a printed expression is a part balanced on its own: the trend chart, or a
        call of a proven macro with text arguments, or an argument that holds such a part."""
        if isinstance(child, nodes.Name):
            return child.name in _PROVEN_ARGUMENTS
        if isinstance(child, nodes.Filter):
            return (child.name == "safe" and isinstance(child.node, nodes.Name)
                    and child.node.name in _CHECKED_ELSEWHERE)
        return (isinstance(child, nodes.Call) and self.is_macro(child.node)
                and not child.kwargs and child.dyn_args is None and child.dyn_kwargs is None
                and all(map(self.is_text, child.args)) and self.proven(child.node.name))

    def skeleton(self, body: Sequence[nodes.Node]) -> str:
        """The markup of a list of nodes with each value as `_VALUE` and each part balanced on
        its own as `_UNIT`; raises _Unproven."""
        out: list[str] = []
        for node in body:
            if isinstance(node, nodes.Output):
                for child in node.nodes:
                    if isinstance(child, nodes.TemplateData):
                        out.append(child.data)
                    elif self.is_unit(child):
                        out.append(_UNIT)
                    elif self.is_text(child):
                        out.append(_VALUE)
                    else:
                        raise _Unproven(f"a value that may be markup, line {child.lineno}")
            elif isinstance(node, nodes.If):
                tests = [node.test, *(other.test for other in node.elif_)]
                if not all(map(self.is_text, tests)):
                    raise _Unproven(f"a test, line {node.lineno}")
                branches = [node.body, *(other.body for other in node.elif_), node.else_]
                out.append(_branch([self.skeleton(branch) for branch in branches]))
            elif isinstance(node, nodes.For):
                if node.recursive or not self.is_text(node.iter) or (
                        node.test is not None and not self.is_text(node.test)):
                    raise _Unproven(f"a loop, line {node.lineno}")
                out.append(_branch([self.skeleton(node.body), self.skeleton(node.else_)]))
            elif isinstance(node, nodes.Assign):
                if not self.is_text(node.node):
                    raise _Unproven(f"an assignment, line {node.lineno}")
            elif isinstance(node, nodes.With):
                if not all(map(self.is_text, node.values)):
                    raise _Unproven(f"a with, line {node.lineno}")
                out.append(self.skeleton(node.body))
            else:
                raise _Unproven(f"{type(node).__name__}, line {node.lineno}")
        return "".join(out)


@cache
def _text_filters() -> frozenset[str]:
    """The filters whose results are plain text: the pages' own and a few of Jinja's."""
    from pipeline.release.pages import SHARED_FILTERS

    return frozenset((*SHARED_FILTERS, "band", "isolated", "directionless", "search_text",
                      *_TEXT_FILTERS))


def _branch(skeletons: list[str]) -> str:
    """What a set of alternatives (an `if`'s branches, a loop's body drawn any number of times)
    stands for: `_VALUE` when none holds a tag or a quote (text, or words within a tag), or
    `_UNIT` when each is whole and balanced on its own; raises _Unproven otherwise."""
    if not any(mark in skeleton for skeleton in skeletons for mark in "<>\"'"):
        return _VALUE if any(skeletons) else ""
    if all(_whole(skeleton) for skeleton in skeletons):
        return _UNIT
    raise _Unproven("a branch whose tags are not balanced on their own")


def _whole(skeleton: str) -> bool:
    """Whether markup is balanced tags and text: no `<` or `>` outside a tag, each part
    (`_UNIT`) a token of its own outside any tag, each value outside a tag or within an
    attribute's quoted value."""
    if _balanced_links(skeleton) is None:
        return False
    units = 0
    for token in _TAG.finditer(skeleton):
        text = token.group()
        if text == _UNIT:
            units += 1
        elif _VALUE in text and not _values_quoted(text):
            return False
    rest = _TAG.sub("", skeleton)
    return units == skeleton.count(_UNIT) and "<" not in rest and ">" not in rest


def _values_quoted(tag: str) -> bool:
    """Whether every value in a tag lies within a quoted attribute value (never in its name, an
    attribute's name or an unquoted value, where it could make an attribute)."""
    outside, quote = [], None
    for character in tag:
        if quote is None:
            if character in "\"'":
                quote = character
            else:
                outside.append(character)
        elif character == quote:
            quote = None
    return quote is None and _VALUE not in "".join(outside)


def _proven(env: Environment, template: str) -> frozenset[str]:
    """The macros of `template` whose output balances for any text they are given."""
    read = _Template(env, template)
    return frozenset(name for name in read.defined if read.proven(name))


@cache
def proven_macros(template: str) -> frozenset[str]:
    """The macros of a template of the pages whose output balances for any entry."""
    return _proven(environment(), template)


def links_possible(fragment: str) -> bool:
    """Whether a proven macro's output may hold a link: it names a link attribute."""
    return "href" in fragment or "src" in fragment or "data-source" in fragment
