"""A Dumpling schema file's CREATE TABLE -> the table's row codec (read, never executed).

Dumpling writes the server's own SHOW CREATE TABLE: one column or index per line, names in
backquotes, TiDB's extensions in `/*T![feature] ... */` comments. The text is tokenized (quoted
strings, quoted names, parentheses, words) rather than matched with one pattern, so a COMMENT
or DEFAULT holding a keyword, a comma or a parenthesis cannot be misread as structure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ticdc_delta.exceptions import InvalidMessage
from ticdc_delta.schema_cache import types
from ticdc_delta.schema_cache.canal.mysql_type import parse_mysql_type
from ticdc_delta.schema_cache.codec import ColumnCodec, RowCodec, ValueContext, column_default
from ticdc_delta.schema_cache.dumpling.values import dumpling_value
from ticdc_delta.schema_cache.events import TableName

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<comment>/\*.*?\*/)
    | (?P<string>'(?:[^'\\]|\\.|'')*')
    | (?P<dquoted>"(?:[^"\\]|\\.|"")*")
    | (?P<name>`(?:[^`]|``)*`)
    | (?P<punct>[(),;.])
    | (?P<word>[^\s(),;.'"`]+)
    )""",
    re.VERBOSE | re.DOTALL,
)
# Words after which a column definition's type ends.
_ATTRIBUTES = {
    "NOT", "NULL", "DEFAULT", "AUTO_INCREMENT", "AUTO_RANDOM", "COMMENT", "CHARACTER", "CHARSET", "COLLATE",
    "GENERATED", "AS", "ON", "PRIMARY", "UNIQUE", "KEY", "REFERENCES", "CHECK", "VISIBLE", "INVISIBLE",
    "COLUMN_FORMAT", "STORAGE", "SRID", "SERIAL",
}


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens of `text` without comments; refuses what it cannot tokenize."""
    tokens, at = [], 0
    while at < len(text):
        if text[at:].isspace():
            break
        match = _TOKEN.match(text, at)
        if match is None:
            raise InvalidMessage(f"cannot read the schema file's statement at {text[at:at + 40]!r}")
        at = match.end()
        if match.lastgroup != "comment":
            tokens.append((match.lastgroup, match.group(match.lastgroup)))
    return tokens


def _unquote_name(token: str) -> str:
    return token[1:-1].replace("``", "`")


_STRING_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _unquote_string(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(_STRING_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        elif ch == token[0] and body[i + 1:i + 2] == token[0]:
            out.append(ch)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _definitions(tokens: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], Iterator[list[tuple[str, str]]]]:
    """The table name tokens and each definition between the statement's outer parentheses."""
    while tokens and tokens[0][1] == ";":  # what the session-setting comments before it leave
        tokens = tokens[1:]
    words = [t.upper() for _, t in tokens[:2]]
    if words != ["CREATE", "TABLE"]:
        raise InvalidMessage("the schema file holds no CREATE TABLE statement")
    start = next((i for i, (_, t) in enumerate(tokens) if t == "("), None)
    if start is None:
        raise InvalidMessage("the CREATE TABLE statement has no column list")
    name = [t for t in tokens[2:start] if t[1].upper() not in ("IF", "NOT", "EXISTS")]
    definitions: list[list[tuple[str, str]]] = [[]]
    depth = 1
    for token in tokens[start + 1:]:
        text = token[1]
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                return name, iter(d for d in definitions if d)
        elif text == "," and depth == 1:
            definitions.append([])
            continue
        definitions[-1].append(token)
    raise InvalidMessage("the CREATE TABLE statement's column list does not end")


def _group_end(tokens: list[tuple[str, str]], start: int) -> int:
    """The index after the parenthesized group that opens at `start`."""
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i][1] == "(":
            depth += 1
        elif tokens[i][1] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise InvalidMessage("unbalanced parentheses in the CREATE TABLE statement")


def _index_columns(tokens: list[tuple[str, str]]) -> tuple[str, ...]:
    """The column names of an index definition's key part list (prefix lengths dropped)."""
    start = next(i for i, (_, t) in enumerate(tokens) if t == "(")
    parts, depth = [], 0
    for kind, text in tokens[start:_group_end(tokens, start)]:
        depth += text == "("
        depth -= text == ")"
        if kind == "name" and depth == 1:
            parts.append(_unquote_name(text))
    return tuple(parts)


def _default_text(tokens: list[tuple[str, str]], i: int) -> object:
    """The DEFAULT clause's value at token `i`, as the schema protocols carry it (text; None for NULL)."""
    kind, text = tokens[i]
    if kind == "string":
        return _unquote_string(text)
    if text.upper() == "NULL":
        return None
    if re.fullmatch(r"[bB]", text) and i + 1 < len(tokens) and tokens[i + 1][0] == "string":  # b'101'
        return str(int(_unquote_string(tokens[i + 1][1]) or "0", 2))
    if text.startswith("_") and i + 1 < len(tokens) and tokens[i + 1][0] == "string":  # _utf8mb4'x'
        return _unquote_string(tokens[i + 1][1])
    return text  # a number, or CURRENT_TIMESTAMP and the like (no single value)


def _column(tokens: list[tuple[str, str]], context: ValueContext) -> tuple[ColumnCodec, bool, bool]:
    """A column definition -> (codec, is an inline PRIMARY KEY, is an inline UNIQUE)."""
    name = _unquote_name(tokens[0][1])
    i = 1
    type_parts: list[str] = []
    while i < len(tokens) and tokens[i][1].upper() not in _ATTRIBUTES:
        if tokens[i][1] == "(":
            end = _group_end(tokens, i)
            type_parts.append("(" + ",".join(t for _, t in tokens[i + 1:end - 1] if t != ",") + ")")
            i = end
        else:
            type_parts.append(" " + tokens[i][1])
            i += 1
    tidb = parse_mysql_type("".join(type_parts).strip())
    nullable, default, primary, unique, binary_charset = True, None, False, False, False
    while i < len(tokens):
        word = tokens[i][1].upper()
        following = tokens[i + 1][1].upper() if i + 1 < len(tokens) else ""
        if word == "NOT" and following == "NULL":
            nullable = False
            i += 2
            continue
        if word == "DEFAULT" and i + 1 < len(tokens):
            default = _default_text(tokens, i + 1)
        elif word in ("GENERATED", "AS") and (word == "AS" or following == "ALWAYS"):
            raise InvalidMessage(f"column {name!r} is a generated column, which snapshots do not load yet")
        elif word == "PRIMARY":
            primary = True
        elif word == "UNIQUE":
            unique = True
        elif word in ("CHARACTER", "CHARSET"):
            charset = tokens[i + 2][1] if word == "CHARACTER" and i + 2 < len(tokens) else following
            binary_charset = charset.lower() == "binary"
        i += 1
    if binary_charset and tidb.name in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext"):
        tidb = types.TiDBType(tidb.name, length=tidb.length, binary=True)
    codec = ColumnCodec(
        name=name, tidb=tidb, reader=dumpling_value, nullable=nullable and not primary,
        default=column_default(tidb, default, context.types),
    )
    return codec, primary, unique


def parse_create_table(statement: str, database: str, context: ValueContext = ValueContext()) -> RowCodec:
    """The row codec of the table a schema file's CREATE TABLE describes, in database `database`.

    The handle key is the primary key, else the first unique key whose columns are all NOT NULL
    (TiCDC's rule).
    """
    name_tokens, definitions = _definitions(_tokens(statement))
    names = [_unquote_name(t) if k == "name" else t for k, t in name_tokens if t != "."]
    if not names:
        raise InvalidMessage("the CREATE TABLE statement names no table")
    columns: list[ColumnCodec] = []
    primary: tuple[str, ...] = ()
    uniques: list[tuple[str, ...]] = []
    for tokens in definitions:
        kind, first = tokens[0]
        if kind == "name":
            column, inline_primary, inline_unique = _column(tokens, context)
            columns.append(column)
            primary = (column.name,) if inline_primary else primary
            if inline_unique:
                uniques.append((column.name,))
            continue
        head = " ".join(t.upper() for k, t in tokens[:3] if k == "word")
        if first.upper() == "CONSTRAINT":  # CONSTRAINT [name] PRIMARY KEY / UNIQUE ...
            tokens = tokens[2:] if tokens[1][0] == "name" else tokens[1:]
            head = " ".join(t.upper() for k, t in tokens[:3] if k == "word")
        if head.startswith("PRIMARY KEY"):
            primary = _index_columns(tokens)
        elif head.startswith("UNIQUE"):
            uniques.append(_index_columns(tokens))
    not_null = {c.name for c in columns if not c.nullable}
    if primary:
        columns = [c if c.name not in primary or not c.nullable else _not_null(c) for c in columns]
    key = primary or next((u for u in uniques if u and set(u) <= not_null), ())
    return RowCodec.build(TableName(database, names[-1]), columns, key, context)


def _not_null(column: ColumnCodec) -> ColumnCodec:
    return ColumnCodec(column.name, column.tidb, column.reader, column.hint, False, column.default, column.field, column.spark_type)
