"""The CSV files operators hand the agent (portfolios, campaigns), read one way.

Each row comes with the line it starts on (quoted fields may span lines), or
with what is wrong with it, so a file's bad rows can all be reported at once
with their line numbers; what makes the whole file unreadable raises the
caller's own error class with the file's name and the reason.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Collection, Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

Rows = Iterator[tuple[int, dict[str, str], str | None]]


def read_text(path: Path, kind: str, error: type[Exception]) -> str:
    """The file's text (UTF-8, a byte-order mark dropped), or ``error`` saying it is none."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{path.name}: not a UTF-8 text file, so not a {kind} CSV") from None


def rows(
    text: str,
    name: str,
    kind: str,
    error: type[Exception],
    required: Collection[str],
    optional: Collection[str] = (),
) -> Rows:
    """The rows of ``text`` as column -> stripped text, each with its first line number,
    or with the reason it is no row (its field count). Columns outside ``required``
    and ``optional`` are ignored (and logged)."""
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        raise error(f"{name}: a binary file, not a {kind} CSV")
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader)
    except StopIteration:
        raise error(f"{name}: empty file, no header row") from None
    except csv.Error as exc:
        raise error(f"{name}: cannot read the header row as CSV: {exc}") from None
    columns = [column.strip().lower() for column in header]
    missing = [column for column in required if column not in columns]
    if missing:
        raise error(
            f"{name}: not a {kind} CSV: the header (line 1) lacks the required "
            f"column(s) {', '.join(missing)}"
        )
    duplicated = sorted({column for column in columns if column and columns.count(column) > 1})
    if duplicated:
        raise error(f"{name}: the header names {', '.join(duplicated)} twice")
    unknown = [c for c in columns if c not in required and c not in optional]
    if unknown:
        logger.info("%s %s: ignoring column(s) %s", kind, name, ", ".join(unknown))

    line = reader.line_num
    while True:
        start = line + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            # The csv module cannot resume after a broken quote: the rest is one field.
            raise error(f"{name} line {start}: cannot read as CSV: {exc}") from None
        line = reader.line_num
        if not any(value.strip() for value in values):
            continue
        if len(values) != len(columns):
            yield start, {}, f"the row has {len(values)} fields, the header {len(columns)}"
            continue
        yield start, dict(zip(columns, (value.strip() for value in values), strict=True)), None
