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

from collections.abc import Sequence
from itertools import pairwise
from operator import attrgetter, itemgetter
from typing import NamedTuple

from ticdc_delta.schema_cache.events import Op, RowChange


class NetChange(NamedTuple):
    """The final state of one key: its row image, or its deletion.

    For a delete, `values` is the last known image; only the key columns matter.
    """

    deleted: bool
    values: tuple


_by_commit_ts = attrgetter("commit_ts")


def collapse(rows: Sequence[RowChange], *, by_commit_ts: bool = True) -> list[NetChange]:
    """The net change per key of `rows`, which must share one handle key.

    One pass in arrival order. The gate releases rows ordered by commitTs
    already; rows that are not (a caller's own list) are first put in that
    order, keeping arrival order within a commitTs. At one commitTs an upsert
    of a key beats a delete of it whatever their order: only a split UPDATE
    produces both. `by_commit_ts` False: the protocol's order is arrival order.
    """
    if not rows:
        return []
    if by_commit_ts and any(a.commit_ts > b.commit_ts for a, b in pairwise(rows)):
        rows = sorted(rows, key=_by_commit_ts)  # stable: arrival order within a commitTs
    key_of = itemgetter(*rows[0].schema.key_indexes())
    # key -> (commitTs, deleted, image)
    final: dict[object, tuple[int, bool, tuple]] = {}
    get = final.get
    tie_rule = by_commit_ts
    for row in rows:
        op, ts = row.op, row.commit_ts
        if op is Op.INSERT or op is Op.UPSERT:
            final[key_of(row.after)] = (ts, False, row.after)
            continue
        if op is Op.UPDATE:
            old_key, new_key = key_of(row.before), key_of(row.after)
            if old_key == new_key:
                final[new_key] = (ts, False, row.after)
                continue
            # A key-changing UPDATE moves the row: delete the old key.
            delete_key, delete_image = old_key, row.before
            final[new_key] = (ts, False, row.after)
        else:
            delete_key, delete_image = key_of(row.before), row.before
        current = get(delete_key)
        if tie_rule and current is not None and current[0] == ts and not current[1]:
            continue  # the upsert half of a split update at this commitTs stands
        final[delete_key] = (ts, True, delete_image)
    return [NetChange(deleted, image) for _, deleted, image in final.values()]
