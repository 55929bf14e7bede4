"""A small JSON Schema validator for the tests' fixture schemas, used where the `jsonschema` package is not installed.

It knows the keywords those schemas use, with their draft 2020-12 meaning: type, enum, const, required, properties,
additionalProperties, items, minimum, maximum, pattern, oneOf, anyOf, allOf, if/then/else and local $refs
("#/$defs/name"); any other keyword fails loudly rather than being skipped, so a schema can't silently ask for
more than is checked. `errors(instance, schema)` lists what is wrong (empty when valid), each with its JSON path.
"""
from __future__ import annotations

import re
from typing import Any

_NOTES = {"$schema", "$id", "$comment", "title", "description", "$defs"}
_KNOWN = _NOTES | {"type", "enum", "const", "required", "properties", "additionalProperties", "items", "minimum",
                   "maximum", "pattern", "oneOf", "anyOf", "allOf", "if", "then", "else", "$ref"}


def _is_type(v: Any, name: str) -> bool:
    # JSON has no booleans among its numbers, and 2.0 is an integer (draft 2020-12)
    if name == "integer":
        return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    if name == "number":
        return not isinstance(v, bool) and isinstance(v, (int, float))
    kinds = {"string": str, "object": dict, "array": list, "boolean": bool, "null": type(None)}
    return isinstance(v, kinds[name])


def _resolve(ref: str, root: dict) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $refs are supported, not {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def errors(instance: Any, schema: dict, root: dict | None = None, path: str = "$") -> list[str]:
    """Everything about `instance` that `schema` rejects (an empty list when it is valid)."""
    root = schema if root is None else root
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema keywords this validator doesn't know: {sorted(unknown)}")
    out: list[str] = []
    if "$ref" in schema:
        out += errors(instance, _resolve(schema["$ref"], root), root, path)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(instance, n) for n in names):
            return out + [f"{path}: {type(instance).__name__} {instance!r:.40} is not of type {'/'.join(names)}"]
    if "enum" in schema and instance not in schema["enum"]:
        out.append(f"{path}: {instance!r:.40} is not one of {schema['enum']}")
    if "const" in schema and instance != schema["const"]:
        out.append(f"{path}: {instance!r:.40} is not {schema['const']!r}")
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            out.append(f"{path}: {instance} is below {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            out.append(f"{path}: {instance} is above {schema['maximum']}")
    if isinstance(instance, str) and "pattern" in schema and not re.search(schema["pattern"], instance):
        out.append(f"{path}: {instance!r:.40} does not match {schema['pattern']!r}")
    if isinstance(instance, dict):
        out += [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in instance]
        props = schema.get("properties", {})
        for k, v in instance.items():
            if k in props:
                out += errors(v, props[k], root, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{path}: unexpected key {k!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += errors(v, schema["additionalProperties"], root, f"{path}.{k}")
    if isinstance(instance, list) and "items" in schema:
        for i, v in enumerate(instance):
            out += errors(v, schema["items"], root, f"{path}[{i}]")
    for sub in schema.get("allOf", []):
        out += errors(instance, sub, root, path)
    if "anyOf" in schema and all(errors(instance, s, root, path) for s in schema["anyOf"]):
        out.append(f"{path}: matches none of anyOf")
    if "oneOf" in schema:
        fits = [not errors(instance, s, root, path) for s in schema["oneOf"]]
        if sum(fits) != 1:
            # the branch's own errors say more than the count when nothing fits
            best = min((errors(instance, s, root, path) for s in schema["oneOf"]), key=len) if not any(fits) else []
            out += best or [f"{path}: matches {sum(fits)} of oneOf's schemas, not exactly one"]
    if "if" in schema:
        branch = schema.get("then") if not errors(instance, schema["if"], root, path) else schema.get("else")
        if branch is not None:
            out += errors(instance, branch, root, path)
    return out
