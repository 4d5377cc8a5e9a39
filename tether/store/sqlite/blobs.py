"""Large ledger blobs, compressed in the SQLite store.

A model call's ledger row holds the whole request it was given (the context bundle: often
several kB, repeated with small changes at every step of a session), and receipts are kept
for days. ``pack`` deflates a blob of ``PACK_OVER`` bytes or more when that saves at least a
tenth of it, and marks it with a leading ``0xC1``: a byte msgpack never uses, so a stored
blob is read without knowing how it was written, and rows written before (or small ones)
are read as they are. Only the SQLite store packs; everything above it sees plain msgpack.
"""

from __future__ import annotations

import zlib
from typing import overload

PACK_OVER = 1024  # bytes; below this, deflate saves little and costs a call
_MARK = b"\xc1"  # "never used" in msgpack: no msgpack value starts with it
_LEVEL = 1  # the fastest level: ledger blobs are repetitive text, it already halves them


@overload
def pack(blob: bytes) -> bytes: ...
@overload
def pack(blob: None) -> None: ...
def pack(blob: bytes | None) -> bytes | None:
    """``blob`` as stored: deflated and marked when that saves a tenth or more."""
    if blob is None or len(blob) < PACK_OVER:
        return blob
    packed = _MARK + zlib.compress(blob, _LEVEL)
    return packed if len(packed) * 10 <= len(blob) * 9 else blob


@overload
def unpack(blob: bytes) -> bytes: ...
@overload
def unpack(blob: None) -> None: ...
def unpack(blob: bytes | None) -> bytes | None:
    """A stored blob as written. One that is marked but does not inflate (damaged on disk) is
    handed on as stored: it is not msgpack, so the layer that decodes it reports it the way it
    reports any undecodable blob (an effect's arguments shown as undecodable, a receipt that
    fails its replay), and one damaged row never stops a listing of the others."""
    if blob is None or not blob.startswith(_MARK):
        return blob
    try:
        return zlib.decompress(blob[1:])
    except zlib.error:
        return blob
