"""Collapse a table's row changes to the net change per key.

MERGE INTO needs at most one source row per key, and one MERGE per batch is
far cheaper than one per event. The net change of a key is its last mutation:
an upsert carrying the full row image, or a delete.

Order: by commitTs, then arrival. Within one commitTs a key can see a delete
and an upsert only when TiCDC split one UPDATE into DELETE(old) + INSERT(new)
(TiDB emits one final mutation per key per transaction); the row exists after
such a transaction, so at equal commitTs the upsert wins whatever partition
each half arrived on. For offset-ordered protocols the order is arrival only:
a key's changes all come from one partition, in commit order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from schema_cache.events import Op, RowChange


@dataclass(frozen=True, slots=True)
class NetChange:
    """The final state of one key: its row image, or its deletion.

    For a delete, `values` is the last known image; only the key columns matter.
    """

    deleted: bool
    values: tuple


_DELETE_FIRST, _UPSERT_AFTER = 0, 1


def _mutations(rows: Iterable[RowChange], key_indexes: Sequence[int]):
    def key_of(values: tuple) -> tuple:
        return tuple(values[i] for i in key_indexes)

    for seq, row in enumerate(rows):
        if row.op is Op.INSERT or row.op is Op.UPSERT:
            yield (row.commit_ts, _UPSERT_AFTER, seq), key_of(row.after), NetChange(False, row.after)
        elif row.op is Op.DELETE:
            yield (row.commit_ts, _DELETE_FIRST, seq), key_of(row.before), NetChange(True, row.before)
        else:
            old_key, new_key = key_of(row.before), key_of(row.after)
            if old_key != new_key:
                # A key-changing UPDATE moves the row: delete the old key.
                yield (row.commit_ts, _DELETE_FIRST, seq), old_key, NetChange(True, row.before)
            yield (row.commit_ts, _UPSERT_AFTER, seq), new_key, NetChange(False, row.after)


def collapse(rows: Sequence[RowChange], *, by_commit_ts: bool = True) -> list[NetChange]:
    """The net change per key of `rows`, which must share one handle key.

    `by_commit_ts` False: `rows` are in their protocol's order already (arrival).
    """
    if not rows:
        return []
    key_indexes = rows[0].schema.key_indexes()
    mutations = _mutations(rows, key_indexes)
    if by_commit_ts:
        mutations = sorted(mutations, key=lambda m: m[0])
    final: dict[tuple, NetChange] = {}
    for _, key, change in mutations:
        final[key] = change
    return list(final.values())
