"""TiCDC's large-message handling, undone on the consumer side.

- `large-message-handle-compression` (lz4 or snappy) compresses every
  message value TiCDC sends, not only large ones, and nothing in the message
  says so: the consumer must be configured the same way. lz4 is the LZ4 frame
  format; snappy the raw block format (TiCDC: pkg/compression).
- `claim-check` stores an oversized message in external storage as
  `<uuid>.json` (`{"key": base64|null, "value": base64}`, or the raw value
  with `claim-check-raw-value`) and sends a small message naming its
  location. Only the file's base name is taken from the message; it is read
  from the configured root, so no message can make the job read elsewhere.
- `handle-key-only` sends only the key columns; the rest must be read from
  upstream TiDB at the commitTs. Not supported here: such messages are bad
  input, never applied as partial rows.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from dataclasses import dataclass

import cramjam
import fsspec

from ticdc_delta.exceptions import ConfigError, InvalidMessage

COMPRESSIONS = ("none", "lz4", "snappy")


def decompress(codec: str, data: bytes) -> bytes:
    """Undo `large-message-handle-compression` for one value."""
    if codec == "none":
        return data
    try:
        if codec == "lz4":
            return bytes(cramjam.lz4.decompress(data))
        if codec == "snappy":
            return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as err:  # noqa: BLE001 - cramjam raises its own DecompressionError
        raise InvalidMessage(f"not {codec}-compressed as configured: {err}") from err
    raise ConfigError(f"protocol.large_message_compression: {codec!r} is not allowed; allowed: {', '.join(COMPRESSIONS)}")


@dataclass(frozen=True)
class ClaimCheck:
    """Where claim-checked messages are read from: a root any fsspec filesystem can open."""

    root: str
    raw_value: bool = False

    def _path(self, location: str) -> str:
        name = posixpath.basename(location.replace("\\", "/"))
        if not name or name in (".", "..") or "/" in name:
            raise InvalidMessage(f"claim-check location {location!r} names no file")
        return self.root.rstrip("/") + "/" + name

    def read(self, location: str) -> tuple[bytes | None, bytes]:
        """(key, value) of the claim-checked message; the value is still compressed as configured."""
        path = self._path(location)
        try:
            with fsspec.open(path, "rb") as handle:
                content = handle.read()
        except FileNotFoundError as err:
            raise InvalidMessage(f"claim-check file {path!r} does not exist") from err
        except OSError as err:
            raise InvalidMessage(f"claim-check file {path!r} cannot be read: {err}") from err
        if self.raw_value:
            return None, content
        try:
            stored = json.loads(content)
            key = stored.get("key")
            return (None if key is None else base64.b64decode(key)), base64.b64decode(stored["value"])
        except (ValueError, KeyError, TypeError, binascii.Error) as err:
            raise InvalidMessage(f"claim-check file {path!r} is not a claim-check message: {err}") from err


@dataclass(frozen=True)
class LargeMessages:
    """How a decoder undoes the changefeed's large-message handling: compression, claim-check."""

    compression: str = "none"
    claim_check: ClaimCheck | None = None

    def value(self, data: bytes) -> bytes:
        """A message value as TiCDC encoded it before compressing it."""
        return decompress(self.compression, data)

    def claimed(self, location: str) -> tuple[bytes | None, bytes]:
        """(key, value) of the claim-checked original `location` names; the value still compressed."""
        if self.claim_check is None:
            raise InvalidMessage("a claim-check message, but protocol.claim_check_root is not set")
        return self.claim_check.read(str(location))


def handle_key_only() -> InvalidMessage:
    """The error for a message that carries only its handle key."""
    return InvalidMessage(
        "the message holds only its handle key (TiCDC large-message-handle-option = handle-key-only); "
        "the full row would have to be read from upstream TiDB, which this job does not do, and applying "
        "the key columns alone would lose the others; set the changefeed's large-message-handle-option to "
        "claim-check (protocol.claim_check_root here) so that every row arrives whole"
    )
