"""Shared JSON writer for the fixture scripts: indented objects, lists of
scalars on one line (compact, diff-friendly, deterministic key order as given)."""

import json


def dumps(obj, indent=0):
    pad = "  " * indent
    inner = "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(not isinstance(v, (dict, list)) for v in obj):
            return json.dumps(obj, ensure_ascii=False)
        items = [f"{inner}{dumps(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path, doc):
    """Write `doc` as UTF-8 JSON with a trailing newline."""
    text = dumps(doc) + "\n"
    json.loads(text)  # self-check
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
