#!/usr/bin/env python3
"""Open a gate HTML report in headless Chromium: it must render, offline, without console output.

Usage::

    python scripts/check_html_report.py out/report.html --screenshot out/report.png

Checks, in order (exit 0 when all pass, 1 when a check fails, 2 on bad usage
or a missing browser):

1. the file has no external reference (``http(s)://`` or ``//`` in a ``src``,
   ``href``, ``srcset``, ``action`` or CSS ``url(...)``);
2. Chromium loads it (``--dump-dom``) and the rendered DOM holds the verdict
   banner (``id="verdict"``);
3. the browser logged no console message while loading it (the report has no
   script, so any message is an error — e.g. a load the page's
   Content-Security-Policy refused);
4. ``--screenshot`` writes a non-empty PNG of the page.

The browser runs with a fresh ``--user-data-dir`` and without network
services (background networking, component updates, sync disabled). Set
``CHROMIUM`` to use another binary than ``/usr/bin/chromium`` (or the first of
``chromium``, ``chromium-browser``, ``google-chrome`` on ``PATH``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
)
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
EXTERNAL = re.compile(
    r"""(?:\b(?:src|href|srcset|action)\s*=\s*["']?\s*|url\(\s*["']?)(?:https?:)?//""",
    re.IGNORECASE,
)
CONSOLE = re.compile(r":CONSOLE[:(]")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class CheckFailed(Exception):
    """A check did not pass; the message says which and why."""


def find_browser() -> str | None:
    """The Chromium binary to use, or ``None``."""
    wanted = os.environ.get("CHROMIUM")
    for name in (wanted,) if wanted else CANDIDATES:
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def external_references(html: str) -> list[str]:
    """Snippets of the page that point outside the file."""
    return [html[max(0, m.start() - 20) : m.end() + 40] for m in EXTERNAL.finditer(html)]


def run_browser(
    browser: str, page: Path, extra: list[str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run on ``page`` with a throw-away profile."""
    with tempfile.TemporaryDirectory(prefix="gate-chromium-") as profile:
        args = [browser, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()]
        try:
            return subprocess.run(
                args, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"chromium did not finish within {timeout:.0f} s") from None


def console_lines(stderr: str) -> list[str]:
    """The console messages Chromium logged."""
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def check(
    page: Path, screenshot: Path | None, *, browser: str, width: int, height: int, timeout: float
) -> list[str]:
    """Run every check; returns lines describing what passed. Raises CheckFailed."""
    html = page.read_text(encoding="utf-8")
    passed = []
    refs = external_references(html)
    if refs:
        raise CheckFailed(f"{len(refs)} external reference(s), first: {refs[0]!r}")
    passed.append("no external references")
    dom = run_browser(browser, page, ["--dump-dom"], timeout=timeout)
    if dom.returncode != 0:
        raise CheckFailed(f"chromium exited {dom.returncode}: {dom.stderr.strip()[-400:]}")
    if 'id="verdict"' not in dom.stdout:
        raise CheckFailed("the rendered page has no verdict banner (id=verdict)")
    messages = console_lines(dom.stderr)
    if messages:
        raise CheckFailed(f"{len(messages)} console message(s), first: {messages[0].strip()}")
    passed.append("rendered with the verdict banner and no console messages")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.unlink(missing_ok=True)
        shot = run_browser(
            browser,
            page,
            [f"--screenshot={screenshot.resolve()}", f"--window-size={width},{height}"],
            timeout=timeout,
        )
        messages = console_lines(shot.stderr)
        if messages:
            raise CheckFailed(f"console message while capturing: {messages[0].strip()}")
        if not screenshot.is_file() or not screenshot.read_bytes().startswith(PNG_MAGIC):
            raise CheckFailed(f"no screenshot written (chromium exit {shot.returncode})")
        passed.append(f"screenshot {screenshot} ({screenshot.stat().st_size} bytes)")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("html", type=Path, help="the HTML report")
    parser.add_argument("--screenshot", type=Path, help="write a PNG screenshot here")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1800)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per browser run")
    args = parser.parse_args(argv)
    if not args.html.is_file():
        print(f"check_html_report: no such file: {args.html}", file=sys.stderr)
        return 2
    browser = find_browser()
    if browser is None:
        print(
            "check_html_report: chromium not found (apt-get install -y chromium, or set CHROMIUM)",
            file=sys.stderr,
        )
        return 2
    try:
        passed = check(
            args.html,
            args.screenshot,
            browser=browser,
            width=args.width,
            height=args.height,
            timeout=args.timeout,
        )
    except CheckFailed as exc:
        print(f"check_html_report: FAILED: {exc}", file=sys.stderr)
        return 1
    for line in passed:
        print(f"check_html_report: ok: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
