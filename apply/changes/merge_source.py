"""A MERGE's source, held where its rows are: in memory (the driver engine) or as a DataFrame (the Spark
engine, a snapshot load). The Delta writer turns either into a temporary view and runs one statement."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ticdc_delta.apply.changes.collapse import NetChange


@dataclass(frozen=True, slots=True)
class SourceRows:
    """Rows held in memory: per row the values of the table's columns (c0..), then the source's own columns.

    `keys_new`: no key of these rows was upstream at the point they follow (`apply.changes.collapse.collapse_run`), so a
    table at that point holds none of them and they can be appended; where a protocol's INSERT means that is
    the applier's to judge.
    """

    rows: list[tuple]
    keys_new: bool = False

    @staticmethod
    def of(changes: Iterable[NetChange]) -> SourceRows:
        """Net changes per key (`apply.changes.collapse`) as a MERGE source: values, then whether deleted."""
        return SourceRows([(*change.values, change.deleted) for change in changes])


@dataclass(frozen=True, slots=True)
class SourceFrame:
    """Rows as a DataFrame of the writer's session, with those columns."""

    frame: DataFrame


MergeSource = SourceRows | SourceFrame
