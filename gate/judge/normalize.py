"""Style normalization of a response before a judge reads it.

A judge should compare what two responses say, not how they are dressed; the
compression-leaderboard methodology (see :mod:`gate.judge`) normalizes style for
that reason. Both responses of a pair pass through :func:`normalize_response`:

1. line ends become ``\\n`` (``\\r\\n`` and ``\\r`` alike);
2. markdown code fences are unwrapped: a fence line (three or more backticks or
   tildes, with an optional info string such as ``python``) is dropped, the code
   between the fences is kept line for line; an unclosed fence (a reply cut off
   inside its code) is unwrapped the same way;
3. outside code, heading markers (``#`` to ``######`` at the start of a line,
   after at most three spaces, and an optional closing run of ``#``) are removed
   and the heading text kept;
4. whitespace runs are collapsed: inside a line every run of spaces and tabs
   becomes one space (code keeps its leading indentation), trailing whitespace
   goes, and runs of empty lines disappear, so lines are separated by exactly one
   ``\\n``; the whole text is stripped.

A response that is only whitespace becomes the empty string. The function is a
pure string map: equal inputs give equal outputs, so a response compared with
itself stays identical after normalization.
"""

from __future__ import annotations

import re

__all__ = ["normalize_response"]

_FENCE = re.compile(r"^ {0,3}(?P<mark>`{3,}|~{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+|$)")
_HEADING_CLOSE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_INNER_WS = re.compile(r"[ \t\f\v]+")
_LEADING_WS = re.compile(r"^[ \t]*")


def _collapse(line: str, keep_indent: bool) -> str:
    """One line with inner whitespace runs as single spaces, no trailing whitespace."""
    indent = ""
    if keep_indent:
        lead = _LEADING_WS.match(line)
        indent = lead.group(0) if lead else ""
        line = line[len(indent) :]
    body = _INNER_WS.sub(" ", line).strip()
    return indent + body if body else ""


def normalize_response(text: str) -> str:
    """``text`` with fences unwrapped, heading markers removed and whitespace collapsed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    fence: str | None = None  # the opening fence mark while inside a code block
    for line in lines:
        match = _FENCE.match(line)
        if fence is None and match is not None:
            fence = match.group("mark")
            continue
        if fence is not None:
            mark = match.group("mark") if match is not None else ""
            closes = (
                match is not None
                and mark[0] == fence[0]
                and len(mark) >= len(fence)
                and not match.group("info").strip()
            )
            if closes:
                fence = None
                continue
            kept = _collapse(line, keep_indent=True)
        else:
            heading = _HEADING.match(line)
            if heading is not None:
                line = _HEADING_CLOSE.sub("", line[heading.end() :])
            kept = _collapse(line, keep_indent=False)
        if kept:
            out.append(kept)
    return "\n".join(out)
