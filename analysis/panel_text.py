"""Text that fits its panel: notes and titles wrapped to the width of the axes they belong to.

A line of text is measured in characters against the panel: at ``fontsize`` points a character is
at most :data:`CHAR_WIDTH_EM` ems wide on average (DejaVu Sans, matplotlib's default font, in the
lowercase letters, digits and punctuation of the notes), so a panel ``width_in`` inches wide holds
:func:`chars_per_line` characters. :func:`wrap` keeps the text's own line breaks and breaks a longer
line at its ``"; "`` and ``": "`` separators first (each coincidence stays on one line where it
can), inside a part only when the part alone is too long. The figures' tests check the rendered
extents as well as the character counts.
"""

from __future__ import annotations

import textwrap

#: Upper bound of the mean advance width of a character of the figures' text, in ems (measured on the notes
#: and titles at 8.5, 10 and 12 pt in DejaVu Sans: 0.48-0.54).
CHAR_WIDTH_EM = 0.55
POINTS_PER_INCH = 72.0
SEPARATORS = ("; ", ": ")


def chars_per_line(width_in: float, fontsize: float) -> int:
    """Characters of ``fontsize``-point text that fit in ``width_in`` inches (at least 10)."""
    return max(int(width_in * POINTS_PER_INCH / (fontsize * CHAR_WIDTH_EM)), 10)


def _parts(line: str) -> list[str]:
    """``line`` cut after each separator (the separator's punctuation kept, its space dropped)."""
    parts = [line]
    for sep in SEPARATORS:
        cut = []
        for part in parts:
            pieces = part.split(sep)
            cut += [piece + sep.rstrip() for piece in pieces[:-1]] + pieces[-1:]
        parts = cut
    return parts


def wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines of at most :func:`chars_per_line` characters (module docstring); the
    text's own line breaks are kept; "" stays ""."""
    width = chars_per_line(width_in, fontsize)
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for part in _parts(line):
            candidate = f"{current} {part}" if current else part
            if len(candidate) <= width:
                current = candidate
                continue
            if current:
                out.append(current)
            pieces = textwrap.wrap(part, width, break_on_hyphens=False) or [""]
            out += pieces[:-1]
            current = pieces[-1]
        out.append(current)
    return "\n".join(out)
