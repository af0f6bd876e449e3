"""The one item-text renderer, shared by training, compression, recompute and the shadow model.

Layout: the title on the first line, then one `key: value` line per attribute, then a blank line and
the description. The order is the point: compression truncates an over-long item from the end, so
what relevance hinges on (title, model, capacity, year) must come first and the marketing prose last.

Attributes are rendered sorted by key, not in the order given. The catalog keeps them as JSON, and a
JSON object's key order is not stable across writers and stores (PostgreSQL JSONB reorders keys);
the same item must always render to the same text, or its content hash and cached gist K/V would
change without any real change. Whitespace inside the title and attributes is collapsed to single
spaces (they are one-line fields); the description keeps its line breaks, trimmed at both ends.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping


def render_item(title: str, attributes: Mapping[str, object], description: str) -> str:
    """Deterministic item text; attributes whose value renders empty (None, "", []) are left out."""
    lines = [_one_line(title)]
    for key in sorted(attributes):
        value = _format_value(attributes[key])
        if value:
            lines.append(f"{_one_line(key)}: {value}")
    body = description.strip()
    if body:
        lines.extend(("", body))
    return "\n".join(lines)


def content_hash(title: str, attributes: Mapping[str, object], description: str) -> str:
    """Hex sha256 of the rendered text (UTF-8).

    The hash covers exactly the text that gets compressed, so "same hash" means "same gist K/V" for a
    given model fingerprint: edits that do not change the rendering (key order, extra spaces) cause no
    recompute, and a change to the renderer itself invalidates every cached blob, as it must.
    """
    return hashlib.sha256(render_item(title, attributes, description).encode("utf-8")).hexdigest()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _format_value(value: object) -> str:
    # bool before int: bool is an int subclass and "True" reads worse than "true" next to JSON data.
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _one_line(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return ", ".join(part for part in map(_format_value, value) if part)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=str)
    return _one_line(str(value))
