"""Options of the Simple protocol (`protocol.name = "simple"`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ticdc_delta.schema_cache.options import (
    LargeMessageOptions,
    ProtocolOptions,
    option_key,
    require_choice,
    require_positive,
)

if TYPE_CHECKING:
    pass

ENCODINGS = ("json", "avro")


@dataclass(frozen=True)
class SimpleOptions(LargeMessageOptions, ProtocolOptions):
    name: ClassVar[str] = "simple"

    # json, or avro (Simple's own Avro schema; no registry involved)
    encoding: str = "json"
    # how long a row change may wait for its structure (BOOTSTRAP / DDL) before it is bad input
    schema_wait_seconds: float = 600.0

    def __post_init__(self) -> None:
        require_choice(option_key("encoding"), self.encoding, ENCODINGS)
        require_positive(option_key("schema_wait_seconds"), self.schema_wait_seconds)
        self._check_large_messages()

