"""CBOR encoding of argument tables, policy definitions and other dicts.

cbor2 alone is not faithful for what AMQP tables carry: it refuses naive
datetimes and loses the sign of ``Decimal('-0')``. Those two get private
tags here, so ``decode(encode(x)) == x`` (with matching types) for str, bytes,
int, float, bool, None, list, dict, Decimal and datetime. Tuples come back as
lists and dict subclasses (e.g. ``FieldTable``) as plain dicts.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from decimal import Decimal
from typing import Any

import cbor2

# Private tag numbers (unassigned in the IANA registry's FCFS range).
_TAG_NAIVE_DATETIME = 44801  # ISO 8601 string without offset
_TAG_DECIMAL = 44802  # str(Decimal): keeps sign, exponent, NaN/Infinity

EMPTY = cbor2.dumps({})


def _prepare(value: Any) -> Any:
    """Replace the values cbor2 cannot carry faithfully by private tags."""
    if isinstance(value, dict):
        return {k: _prepare(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_prepare(v) for v in value]
    if isinstance(value, Decimal):
        return cbor2.CBORTag(_TAG_DECIMAL, str(value))
    if isinstance(value, _dt.datetime) and value.tzinfo is None:
        return cbor2.CBORTag(_TAG_NAIVE_DATETIME, value.isoformat())
    return value


def _tag_hook(*args: Any) -> Any:
    # cbor2 5 calls tag_hook(decoder, tag), cbor2 6 calls tag_hook(tag, immutable).
    tag = args[1] if len(args) > 1 and isinstance(args[1], cbor2.CBORTag) else args[0]
    if tag.tag == _TAG_DECIMAL:
        return Decimal(tag.value)
    if tag.tag == _TAG_NAIVE_DATETIME:
        return _dt.datetime.fromisoformat(tag.value)
    return tag


def encode(value: Any) -> bytes:
    """Encode a dict (or any supported value) to CBOR; None becomes ``{}``."""
    if value is None or (isinstance(value, dict) and not value):
        return EMPTY
    return cbor2.dumps(_prepare(value))


def decode(data: bytes | None) -> Any:
    """Inverse of :func:`encode`."""
    if not data:
        return {}
    return cbor2.loads(data, tag_hook=_tag_hook)


def digest(value: Any) -> str:
    """Stable sha256 hex of a value's canonical CBOR (key order ignored)."""
    raw = cbor2.dumps(_prepare(value or {}), canonical=True)
    return hashlib.sha256(raw).hexdigest()
