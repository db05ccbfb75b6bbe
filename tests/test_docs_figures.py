"""Every measured figure of README.md and docs/*.md names its source run.

The convention (docs/architecture.md, "Figures in the docs"): a section
(heading to next heading) that states a measured figure carries a visible line
that starts with ``Source:`` (or ``Source (what it covers):``) and names

* the command that produced the figure, as a code span that starts with
  ``gate``, ``bash``, ``python``, ``pytest``, ``scripts/``, ``tests/`` or ``.ci/``
  (after environment settings such as ``OMP_NUM_THREADS=1`` and ``.venv/bin/``);
* the machine it ran on (a word such as CPU, GPU, core or host);
* the date, as YYYY-MM-DD.

A figure is found heuristically:

* a number with a unit of time, size or rate (``59 s``, ``3 min``, ``98 MB``,
  ``26 tokens/s``) or a speed-up written ``1.5x``; a number that follows the
  word "default" is the code's setting, not a measurement;
* a table whose header names a metric (CGA, KL, flips, ppl, Elo ...) with a
  row that holds a decimal (``0.9445``, ``2.1e-8``);
* a fenced block that prints a report header (two metric names on one line)
  and decimals.

A block (paragraph, table or fenced block, with the lines directly above it)
that holds numbers which are not measurements (defaults, thresholds, formulas
worked through, a paper's figures with their citation) says so with
``<!-- not measured: WHY -->``; the checker then skips that block only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_UNIT = re.compile(
    r"(?<![\w.,-])(\d+(?:[.,]\d+)?)\s?"
    r"(ms|µs|s|min|MiB|GiB|KiB|MB|GB|kB|tokens/s|tok/s|questions/s|requests/s)"
    r"(?![\w/])"
)
_SPEEDUP = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[x×](?!\w)")
_DEFAULT_BEFORE = re.compile(r"default\W{0,3}$", re.IGNORECASE)
_METRIC = re.compile(
    r"\b(CGA|KL|flips?|ppl|perplexity|Elo|acc|acc_norm|agreement)\b", re.IGNORECASE
)
_DECIMAL = re.compile(r"(?<![\w.])\d\.\d{2,}|\d(?:\.\d+)?e-\d+")
_OPT_OUT = re.compile(r"<!--\s*not measured:\s*\S.*?-->")
_SOURCE_START = re.compile(r"^ {0,3}(?:\*\*?)?Source(?: \([^)]*\))?:")
_SOURCE_COMMAND = re.compile(
    r"`(?:[A-Z_]+=\S* )*(?:\.venv/bin/)?(?:gate|bash|python|pytest|scripts/|tests/|\.ci/)[^`]*`"
)
_SOURCE_MACHINE = re.compile(r"\b(CPU|GPU|cores?|host|H100|H200)\b")
_SOURCE_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


@dataclass(frozen=True)
class Block:
    """A paragraph, table or fenced block: its first line number and its lines."""

    line: int
    lines: tuple[str, ...]

    @property
    def fenced(self) -> bool:
        return any(line.lstrip().startswith("```") for line in self.lines)

    @property
    def opted_out(self) -> bool:
        return any(_OPT_OUT.search(line) for line in self.lines)


@dataclass(frozen=True)
class Section:
    """The text from one heading to the next."""

    heading: str
    blocks: tuple[Block, ...]


def sections(text: str) -> list[Section]:
    """Split markdown into sections of blocks; fenced blocks stay whole."""
    found: list[Section] = []
    heading = "(top)"
    blocks: list[Block] = []
    current: list[str] = []
    start = 0
    in_fence = False

    def close() -> None:
        nonlocal current
        if current:
            blocks.append(Block(start, tuple(current)))
        current = []

    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if not current:
                start = number
            current.append(line)
            in_fence = not in_fence
            continue
        if in_fence:
            current.append(line)
            continue
        if line.startswith("#"):
            close()
            found.append(Section(heading, tuple(blocks)))
            heading, blocks = line.lstrip("# ").strip(), []
            continue
        if not line.strip():
            close()
            continue
        if not current:
            start = number
        current.append(line)
    close()
    found.append(Section(heading, tuple(blocks)))
    return found


def _unit_figures(line: str) -> list[str]:
    line = re.sub(r"<!--.*?-->", "", line)
    figures = [
        m.group(0) for m in _UNIT.finditer(line) if not _DEFAULT_BEFORE.search(line[: m.start()])
    ]
    return figures + _SPEEDUP.findall(line)


def figures(block: Block) -> list[str]:
    """The measured-looking figures of one block (empty where it opted out)."""
    if block.opted_out:
        return []
    if block.fenced:
        body = block.lines
        report = any(len(set(_METRIC.findall(line))) >= 2 for line in body)
        found = [d for line in body if report for d in _DECIMAL.findall(line)]
        comments = [line.split("#", 1)[1] for line in body if "#" in line]
        return found + [f for c in comments for f in _unit_figures(c)]
    found = [f for line in block.lines for f in _unit_figures(line)]
    table = [line for line in block.lines if line.lstrip().startswith("|")]
    if table and _METRIC.search(table[0]):
        found += [d for row in table[2:] for d in _DECIMAL.findall(row)]
    return found


def source_problem(line: str) -> str | None:
    """What a ``Source:`` line lacks (None when it names command, machine and date)."""
    missing = [
        what
        for what, pattern in (
            ("a command in a code span", _SOURCE_COMMAND),
            ("a machine", _SOURCE_MACHINE),
            ("a date (YYYY-MM-DD)", _SOURCE_DATE),
        )
        if not pattern.search(line)
    ]
    return ", ".join(missing) or None


def problems(text: str, where: str) -> list[str]:
    """Every unsourced figure and every incomplete source line of a document."""
    found: list[str] = []
    for section in sections(text):
        sources: list[tuple[int, str]] = []
        for block in section.blocks:
            if block.fenced:
                continue
            for offset, line in enumerate(block.lines):
                if _SOURCE_START.match(line):
                    # A source line may wrap: it runs to the end of its paragraph.
                    sources.append((block.line + offset, " ".join(block.lines[offset:])))
        for number, line in sources:
            lack = source_problem(line)
            if lack:
                found.append(f"{where}:{number}: source line without {lack}")
        if sources:
            continue
        for block in section.blocks:
            figs = figures(block)
            if figs:
                found.append(
                    f"{where}:{block.line}: figures {figs[:4]} in section "
                    f"{section.heading!r} name no source run (add a 'Source:' line with "
                    "the command, the machine and the date, or <!-- not measured: WHY -->)"
                )
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_figure_names_its_source_run(path: Path) -> None:
    assert problems(path.read_text(encoding="utf-8"), path.name) == []


# --- the checker on small texts -------------------------------------------------

_UNSOURCED = """# Speed

The demo took 59 s on the laptop.
"""

_SOURCED = """# Speed

The demo took 2 min 9 s.

Source: `bash scripts/demo.sh`; 2-core x86-64 CPU host; 2026-11-26.

# Other

Nothing measured here.
"""


def test_a_section_with_an_unsourced_figure_fails() -> None:
    found = problems(_UNSOURCED, "x.md")
    assert len(found) == 1 and "x.md:3:" in found[0] and "59 s" in found[0]


def test_a_source_line_in_the_section_satisfies_it() -> None:
    assert problems(_SOURCED, "x.md") == []


def test_a_source_line_in_another_section_does_not_count() -> None:
    text = _UNSOURCED + "\n# Elsewhere\n\nSource: `gate demo`; the 2-core CPU host; 2026-11-26.\n"
    assert len(problems(text, "x.md")) == 1


def test_an_incomplete_source_line_is_named() -> None:
    text = "# Speed\n\nIt took 3 min.\n\nSource: `gate demo` on a laptop.\n"
    (found,) = problems(text, "x.md")
    assert "a machine" in found and "a date" in found and "command" not in found


def test_a_metric_table_and_a_printed_report_are_figures() -> None:
    table = "# T\n\n| build | CGA | KL |\n| --- | --- | --- |\n| nf4 | 0.9445 | 2.1e-8 |\n"
    report = "# R\n\n```\n candidate   CGA   mean KL\n nf4   0.9445   0.0023\n```\n"
    assert "0.9445" in problems(table, "t.md")[0]
    assert "0.9445" in problems(report, "r.md")[0]


def test_defaults_thresholds_and_opt_outs_are_not_figures() -> None:
    text = (
        "# Settings\n\nThe server may take (default 900 s) to start.\n\n"
        "| metric | threshold |\n| --- | --- |\n| cga_min | no decimals here |\n\n"
        "<!-- not measured: the arithmetic of the fan-out -->\n"
        "Twelve jobs of 25 min make 300 min.\n"
    )
    assert problems(text, "s.md") == []
    with_speedup = "# S\n\nBatched scoring is 12.2x faster.\n"
    assert "12.2x" in problems(with_speedup, "s.md")[0]


def test_an_opt_out_needs_its_reason_and_covers_its_block_only() -> None:
    empty = "# S\n\nIt took 3 min. <!-- not measured: -->\n"
    assert "3 min" in problems(empty, "s.md")[0]
    two_blocks = "# S\n\n<!-- not measured: the default -->\nWaits 30 s.\n\nIt took 3 min.\n"
    (found,) = problems(two_blocks, "s.md")
    assert "3 min" in found and "30 s" not in found
