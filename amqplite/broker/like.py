"""SQL's LIKE as a linear-time wildcard matcher (``%`` any run, ``_`` one character).

Selectors come from any client, so a pattern must never cost more than
len(value) * len(pattern): no regular expressions, whose backtracking a
crafted pattern can blow up.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["like_matcher"]


def like_matcher(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """Compile a LIKE pattern (``%`` any run, ``_`` one character) to a matcher.

    The pattern is split at ``%`` into segments; the first must match at the
    start, the last at the end, and each middle one is found leftmost (which is
    always safe for a ``%``-separated pattern), so the cost is at most
    len(value) * len(pattern), never exponential. Common shapes become plain
    string operations.
    """
    segments: list[list[str | None]] = [[]]  # None stands for '_'
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if escape is not None and c == escape:
            if i + 1 >= len(pattern):
                raise ValueError("the pattern ends with its escape character")
            segments[-1].append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            segments.append([])
        elif c == "_":
            segments[-1].append(None)
        else:
            segments[-1].append(c)
        i += 1
    plain = [None not in seg for seg in segments]
    texts = ["".join(c for c in seg if c is not None) for seg in segments]
    if len(segments) == 1:
        seg = segments[0]
        if plain[0]:
            whole = texts[0]
            return lambda s: s == whole
        n = len(seg)
        return lambda s: len(s) == n and _seg_at(seg, s, 0)
    if all(plain):
        first, last, middle = texts[0], texts[-1], texts[1:-1]
        if not middle:
            if not last:
                return lambda s: s.startswith(first)
            if not first:
                return lambda s: s.endswith(last)
            floor = len(first) + len(last)
            return lambda s: len(s) >= floor and s.startswith(first) and s.endswith(last)
        if not first and not last and len(middle) == 1:
            only = middle[0]
            return lambda s: only in s

    head, tail = segments[0], segments[-1]
    # a middle segment without '_' is found by str.find, its text joined here once
    mids = [(seg, texts[k] if plain[k] else None) for k, seg in enumerate(segments[1:-1], 1)]

    def match(s: str) -> bool:
        end = len(s) - len(tail)
        if end < len(head) or not _seg_at(head, s, 0) or not _seg_at(tail, s, end):
            return False
        pos = len(head)
        for seg, text in mids:
            found = s.find(text, pos, end) if text is not None else _seg_find(seg, s, pos, end)
            if found < 0:
                return False
            pos = found + len(seg)
        return True

    return match


def _seg_at(seg: list[str | None], s: str, at: int) -> bool:
    """Does the segment match s at offset ``at`` (caller checks the length fits)?"""
    return all(c is None or s[at + k] == c for k, c in enumerate(seg))


def _seg_find(seg: list[str | None], s: str, start: int, end: int) -> int:
    """Leftmost offset in [start, end - len(seg)] where the segment matches, or -1."""
    n = len(seg)
    for at in range(start, end - n + 1):
        if _seg_at(seg, s, at):
            return at
    return -1
