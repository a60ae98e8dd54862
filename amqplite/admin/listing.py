"""RabbitMQ's list query parameters, applied to any list answer of the admin API.

``?sort=&sort_reverse=`` order a list, ``?page=&page_size=&name=&use_regex=``
turn it into RabbitMQ's paged object, ``?columns=`` keeps only the named
fields (dotted paths reach into nested objects). Tools such as the
management UI, pyrabbit2 and Flower send these; applying them to the
handlers' plain lists keeps every handler ignorant of them.
"""

from __future__ import annotations

import math
from typing import Any

from amqplite.admin.plumbing import Request, bad_request
from amqplite.broker import patterns

__all__ = ["LIST_QUERY", "MAX_PAGE_SIZE", "apply"]

#: the query parameters this module reads
LIST_QUERY = ("columns", "sort", "sort_reverse", "page", "page_size", "name", "use_regex")
MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 100


_MISSING = object()


def _get(item: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(item, dict) or key not in item:
            return _MISSING
        item = item[key]
    return item


def _sort_key(path: list[str]) -> Any:
    """Numbers before strings before missing values, so mixed columns still sort."""
    def key(item: Any) -> tuple[int, Any]:
        v = _get(item, path)
        if isinstance(v, bool | int | float):
            return (0, v)
        if isinstance(v, str):
            return (1, v)
        return (2, 0)
    return key


def _columns(item: Any, paths: list[list[str]]) -> Any:
    """Only the fields named by ``paths``, nested as in ``item``; absent ones left out."""
    if not isinstance(item, dict):
        return item
    out: dict[str, Any] = {}
    for path in paths:
        v = _get(item, path)
        if v is _MISSING:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = v
    return out


def _name_matcher(req: Request) -> Any:
    pattern = req.query.get("name", "")
    if not pattern:
        return None
    if req.flag("use_regex"):
        why = patterns.check(pattern, ignore_case=True)
        if why is not None:
            raise bad_request(f"name: {why}")
        return lambda name: patterns.search(pattern, name, ignore_case=True)
    low = pattern.lower()
    return lambda name: low in name.lower()


def _paths(req: Request) -> list[list[str]]:
    return [c.strip().split(".") for c in req.query.get("columns", "").split(",") if c.strip()]


def columns(obj: dict[str, Any], req: Request) -> dict[str, Any]:
    """One object cut to ``?columns=`` (RabbitMQ takes it on single objects too)."""
    paths = _paths(req)
    return _columns(obj, paths) if paths else obj  # type: ignore[no-any-return]


def apply(items: list[Any], req: Request) -> Any:
    """``items`` sorted, filtered, paged and cut to columns as ``req``'s query asks."""
    query = req.query
    if not any(k in query for k in LIST_QUERY):
        return items
    if query.get("sort"):
        items = sorted(items, key=_sort_key(query["sort"].split(".")),
                       reverse=req.flag("sort_reverse"))
    elif req.flag("sort_reverse"):
        items = list(reversed(items))
    paths = _paths(req)
    if "page" not in query:
        return [_columns(i, paths) for i in items] if paths else items
    page = req.int_arg("page", 1, lo=1)
    size = req.int_arg("page_size", DEFAULT_PAGE_SIZE, lo=1, hi=MAX_PAGE_SIZE)
    match = _name_matcher(req)
    filtered = items if match is None else [
        i for i in items if isinstance(i, dict) and match(str(i.get("name", "")))]
    page_count = math.ceil(len(filtered) / size)
    if page > max(page_count, 1):
        raise bad_request("page out of range")
    chunk = filtered[(page - 1) * size:page * size]
    if paths:
        chunk = [_columns(i, paths) for i in chunk]
    return {
        "filtered_count": len(filtered),
        "item_count": len(chunk),
        "items": chunk,
        "page": page,
        "page_count": page_count,
        "page_size": size,
        "total_count": len(items),
    }
