"""A Griffe extension for the docs site: Sphinx roles in docstrings become cross-references.

The docstrings write ``:class:`KeySet``` and ``:meth:`from_secret```, as
Sphinx does. mkdocstrings renders Markdown, where those roles would show as
text; this extension turns each into an ``<autoref>`` to the object the name
resolves to from the docstring's scope. The reference is optional: a name
the API reference does not render (a builtin, a private helper) stays plain
code instead of failing the strict build. mkdocs.yml loads it.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterator
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj):`(~?)([A-Za-z_][\w.]*)(?:\(\))?`")


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _ROLE.sub(functools.partial(_reference, obj), obj.docstring.value)


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Object):  # an Alias is documented where it points
            yield from _walk(member)


def _reference(obj: griffe.Object, match: re.Match[str]) -> str:
    short, name = match.group(1) == "~", match.group(2)
    title = name.rsplit(".", 1)[-1] if short else name
    head, _, tail = name.partition(".")
    scope = obj if obj.is_class or obj.is_module else obj.parent
    try:
        path = scope.resolve(head) if scope is not None else head
    except (griffe.NameResolutionError, ValueError):
        path = head
    target = f"{path}.{tail}" if tail else path
    return f'<autoref identifier="{html.escape(target)}" optional><code>{html.escape(title)}</code></autoref>'
