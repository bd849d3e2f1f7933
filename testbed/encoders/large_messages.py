"""What TiCDC does to a message value under `large-message-handle-compression` (for the stand-in encoders)."""

from __future__ import annotations

import cramjam


def compress(codec: str, data: bytes) -> bytes:
    """lz4: the LZ4 frame format; snappy: the raw block format (TiCDC: pkg/compression)."""
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(data))
    if codec == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    return data
