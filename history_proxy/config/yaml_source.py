"""Reading the config file's YAML: duplicate keys are errors, and a broken construct is located where
it opened.

PyYAML keeps the last of two equal keys silently (a second ``worker:`` chain would replace the
first); :func:`read_yaml` reports every duplicate with both lines. A scanner error such as an
unterminated quote is noticed where the scanner gave up (often the end of the file); the error names
the line where the construct began, and where it was noticed.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node


class YamlError(Exception):
    """A YAML document that cannot be a config; ``errors`` holds one located line per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that records every duplicate key of a mapping instead of keeping the last."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (ConstructorError, TypeError):
                    continue  # the base class reports an unhashable key itself
                line = key_node.start_mark.line + 1
                if key in seen:
                    self.duplicates.append(
                        f"line {line}: duplicate key {key!r} (first at line {seen[key]}); "
                        "give each key once (the later one would silently replace the earlier)"
                    )
                else:
                    seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


def _located(exc: yaml.YAMLError) -> str:
    """``line L, column C: not valid YAML: ...`` at the start of the broken construct."""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    opened = getattr(exc, "context_mark", None)
    noticed = getattr(exc, "problem_mark", None)
    mark = opened or noticed
    if mark is None:
        return f"(yaml): not valid YAML: {problem}"
    text = f"{context}, {problem}" if context else problem
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    if opened is not None and noticed is not None and noticed.line != opened.line:
        text += f" (noticed at line {noticed.line + 1})"
    return f"{where}: not valid YAML: {text}"


def read_yaml(text: str) -> Any:
    """The document in ``text``; raises :class:`YamlError` on a syntax error or duplicate keys."""
    loader = _Loader(text)
    try:
        document = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise YamlError([_located(exc)]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise YamlError(loader.duplicates)
    return document
