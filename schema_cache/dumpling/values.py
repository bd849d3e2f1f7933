"""Dumpling's data files: records in CSV or SQL INSERT form, and each value's text -> its Python value.

As written by Dumpling (pingcap/tidb dumpling/export/writer_util.go, sql_type.go):

- CSV: fields separated by `,`, strings, temporal, ENUM/SET/JSON and binary values enclosed in `"`,
  numbers bare, NULL as a bare `\\N`; a header of the column names on every file. With
  `--escape-backslash` (the default) NUL, CR, LF, `\\` and the delimiter are written `\\0`, `\\r`,
  `\\n`, `\\\\`, `\\"`, so every record is one line; without it only the delimiter is doubled and a
  value may span lines. Binary values are their raw bytes.
- SQL: `INSERT INTO `t` [(columns)] VALUES` then one `(v,...)` tuple per line ending `,` or `;`;
  strings in `'...'` with the same backslash escapes (plus `\\'`, `\\"`, `\\Z`), or `''` without
  them; binary and BIT values as `x'<hex>'`; NULL bare.

Records are parsed from bytes, so no value is decoded through a text encoding before its column
type says how: binary columns keep their exact bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.codec import ColumnCodec, Converter, ValueContext

_ESCAPES = {ord("0"): b"\0", ord("b"): b"\b", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("Z"): b"\x1a"}
_BACKSLASH = ord("\\")
_QUOTE = ord("'")
_BACKQUOTE = ord("`")


@dataclass(frozen=True)
class CsvDialect:
    """Dumpling's CSV flags: --csv-separator, --csv-delimiter, --csv-null-value, --escape-backslash."""

    separator: bytes = b","
    delimiter: bytes = b'"'
    null: bytes = b"\\N"
    escape_backslash: bool = True

    def __post_init__(self) -> None:
        # An empty delimiter (values unquoted, separators inside them escaped) is not read: refused, not misread.
        if not self.separator or len(self.delimiter) != 1 or self.delimiter == self.separator[:1]:
            raise InvalidMessage(f"unsupported CSV dialect: separator {self.separator!r}, delimiter {self.delimiter!r}")


def _unescape(data: bytes, start: int, stop: int) -> bytes:
    """`data[start:stop]` with its backslash escapes undone (MySQL's: `\\0 \\b \\n \\r \\t \\Z`, else the byte)."""
    chunk = data[start:stop]
    if b"\\" not in chunk:
        return chunk
    out = bytearray()
    i = 0
    while i < len(chunk):
        byte = chunk[i]
        if byte == _BACKSLASH and i + 1 < len(chunk):
            nxt = chunk[i + 1]
            out += _ESCAPES.get(nxt, bytes((nxt,)))
            i += 2
        else:
            out.append(byte)
            i += 1
    return bytes(out)


def _closing_quote(data: bytes, i: int, quote: int, *, backslash: bool, doubled: bool) -> int:
    """The index of the quote closing a quoted text whose body starts at `i`, or len(data) when it does not
    close. `backslash`: a backslash escapes the byte after it; `doubled`: a doubled quote stands for one."""
    n = len(data)
    while i < n:
        byte = data[i]
        if backslash and byte == _BACKSLASH:
            i += 2
        elif byte != quote:
            i += 1
        elif doubled and data[i + 1:i + 2] == bytes((quote,)):
            i += 2
        else:
            return i
    return n


def csv_records(data: bytes, dialect: CsvDialect = CsvDialect()) -> Iterator[list[bytes | None]]:
    """The records of CSV `data` (one or many lines), each a list of values (None for NULL)."""
    sep, quote, n = dialect.separator, dialect.delimiter, len(data)
    i = 0
    while i < n:
        if data[i] in b"\r\n":  # line terminators between records (\r\n by default)
            i += 1
            continue
        record: list[bytes | None] = []
        while True:
            if quote and data.startswith(quote, i):
                value, i = _quoted_csv(data, i + 1, quote[0], dialect.escape_backslash)
                record.append(value)
            else:
                end = i
                while end < n and not data.startswith(sep, end) and data[end] not in b"\r\n":
                    end += 1
                raw = data[i:end]
                record.append(None if raw == dialect.null else (_unescape(data, i, end) if dialect.escape_backslash else raw))
                i = end
            if data.startswith(sep, i):
                i += len(sep)
                continue
            if i < n and data[i] not in b"\r\n":
                raise InvalidMessage(f"unexpected bytes after a CSV value: {data[i:i + 20]!r}")
            break
        yield record


def _quoted_csv(data: bytes, i: int, quote: int, escape_backslash: bool) -> tuple[bytes, int]:
    """The value of a delimited field whose body starts at `i`, and the index after its closing delimiter."""
    end = _closing_quote(data, i, quote, backslash=escape_backslash, doubled=not escape_backslash)
    if end == len(data):
        raise InvalidMessage("a CSV value's closing delimiter is missing (a truncated file?)")
    body = _unescape(data, i, end) if escape_backslash else data[i:end].replace(bytes((quote, quote)), bytes((quote,)))
    return body, end + 1


def _values_keyword(data: bytes, start: int) -> int:
    """The index after the `VALUES` keyword of the INSERT statement at `start` (names in backquotes skipped)."""
    i, n = start, len(data)
    while i < n:
        if data[i] == _BACKQUOTE:
            i = _closing_quote(data, i + 1, _BACKQUOTE, backslash=False, doubled=True) + 1
        elif data.startswith(b"VALUES", i):
            return i + len(b"VALUES")
        else:
            i += 1
    raise InvalidMessage("an INSERT statement without VALUES")


def sql_columns(header: bytes) -> list[str] | None:
    """The column list of an `INSERT INTO `t` (`a`,`b`) VALUES` line; None when it has none."""
    head = header[:_values_keyword(header, 0)]
    names, i, depth = [], 0, 0
    while i < len(head):
        byte = head[i]
        if byte == _BACKQUOTE:
            end = _closing_quote(head, i + 1, _BACKQUOTE, backslash=False, doubled=True)
            if depth == 1:
                try:
                    names.append(head[i + 1:end].replace(b"``", b"`").decode("utf-8"))
                except UnicodeDecodeError as err:
                    raise InvalidMessage(f"a column name that is not UTF-8: {err}") from None
            i = end + 1
            continue
        depth += (byte == ord("(")) - (byte == ord(")"))
        i += 1
    return names or None


def sql_records(data: bytes, escape_backslash: bool = True) -> Iterator[list[bytes | None]]:
    """The value tuples of SQL `data` (tuple lines alone, or whole files with statements and comments)."""
    i, n = 0, len(data)
    while i < n:
        byte = data[i]
        if byte == ord("("):
            record, i = _sql_tuple(data, i + 1, escape_backslash)
            yield record
        elif byte == ord("/") and data.startswith(b"/*", i):
            end = data.find(b"*/", i)
            i = n if end < 0 else end + 2
        elif data.startswith(b"INSERT", i):
            i = _values_keyword(data, i)
        else:
            i += 1  # separators, whitespace, line terminators


def _sql_tuple(data: bytes, i: int, escape_backslash: bool) -> tuple[list[bytes | None], int]:
    record: list[bytes | None] = []
    n = len(data)
    while True:
        while i < n and data[i] in b" \t":
            i += 1
        if i >= n:
            raise InvalidMessage("a value tuple does not end (a truncated file?)")
        byte = data[i]
        if byte == ord("'"):
            value, i = _sql_string(data, i + 1, escape_backslash)
        elif byte in b"xX" and data[i + 1:i + 2] == b"'":
            end = data.index(b"'", i + 2)
            try:
                value = bytes.fromhex(data[i + 2:end].decode("ascii"))
            except ValueError:
                raise InvalidMessage(f"bad hexadecimal literal {data[i:end + 1][:40]!r}") from None
            i = end + 1
        else:
            end = i
            while end < n and data[end] not in b",)":
                end += 1
            raw = data[i:end].strip()
            value = None if raw.upper() == b"NULL" else raw
            i = end
        record.append(value)
        if i < n and data[i] == ord(","):
            i += 1
            continue
        if i < n and data[i] == ord(")"):
            return record, i + 1
        raise InvalidMessage(f"unexpected bytes in a value tuple: {data[i:i + 20]!r}")


def _sql_string(data: bytes, i: int, escape_backslash: bool) -> tuple[bytes, int]:
    # Dumpling doubles a quote only without backslash escapes; MySQL reads both forms either way.
    end = _closing_quote(data, i, _QUOTE, backslash=escape_backslash, doubled=True)
    if end == len(data):
        raise InvalidMessage("a quoted string does not end (a truncated file?)")
    body = _unescape(data, i, end) if escape_backslash else data[i:end]
    return body.replace(b"''", b"'") if b"''" in data[i:end] else body, end + 1


# --- values ---------------------------------------------------------------------------


def dumpling_value(column: ColumnCodec, context: ValueContext) -> Converter:
    """Reader (`schema_cache.codec`): a Dumpling value's bytes -> the column's Python value.

    ENUM and SET come as their member names (what the table holds), BIT as its big-endian bytes,
    TIMESTAMP as wall-clock text in the server's session time zone (`context.zone`), the rest as
    the server prints them (the text form every protocol's conversion starts from).
    """
    t = column.tidb
    if types.is_binary(t):
        return bytes
    if t.name in ("enum", "set"):
        return _text
    if t.name == "bit":
        convert = types.text_converter(t, context.types)
        return lambda raw: convert(int.from_bytes(raw, "big"))
    if t.name == "timestamp":
        zone, options = context.zone, context.types
        return lambda raw: types.timestamp_in_zone(_text(raw), zone, options)
    convert = types.text_converter(t, context.types)
    return lambda raw: convert(_text(raw))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8")
