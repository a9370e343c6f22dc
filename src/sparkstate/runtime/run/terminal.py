"""Data shown on a terminal as text: never Rich markup, never control sequences.

What a job prints comes partly from its data and its user (a console sink's cells, a dead
letter's raw line, a path, a table name, an error quoting a bad value). Printed as Rich
markup, ``[/]`` in it fails the print (``MarkupError``) and ``[link=...]`` makes a link; printed
raw, an escape sequence in it reaches the terminal (moving the cursor, retitling the window,
rewriting what was shown). So data goes through :func:`text`: a Rich ``Text``, which is never
read as markup, with every control character but newline and tab shown as its escape.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that
#: reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(value: Any) -> str:
    """``str(value)`` with control characters shown as escapes (``\\x1b``, ``\\u202e``)."""
    s = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", s)


def text(value: Any, style: str = "") -> Any:
    """``value`` as a Rich ``Text`` of its cleaned string: printed as it is, markup and all."""
    from rich.text import Text

    return Text(clean(value), style=style)


def labelled(label: str, style: str, message: Any) -> Any:
    """``label`` in ``style`` (e.g. ``"error:"``, ``"red"``), then the message as plain text."""
    from rich.text import Text

    return Text.assemble((label, style), " ", clean(message))


def human_bytes(n: float | None) -> str:
    """A size in B, KB, MB or GB (1 KB = 1024 B)."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
