"""Every `gate ...` command line of README.md and docs/*.md, checked against the CLI.

Extracted: each command line of a fenced block (a line that starts with ``gate ``,
or ``$ gate `` where the block marks its commands with ``$``; continuation lines
joined), and each inline code span that starts with ``gate ``.

Checked:

* every one (inline spans too) names a real command (``gate baseline promote``)
  and only options that command has;
* every fenced one parses as click parses it (arity, types, choices);
* every fenced one runs here, in a scratch copy of the repository's run config,
  thresholds, examples and baseline store, with the demo model and nothing
  downloaded: as written when it loads no model (``gate compare``, ``gate
  init``, ``gate baseline list``, ``--matrix``, ``--dry-run``), with
  ``--dry-run`` added where the command has it, else ``--help``. It must end
  with the exit code its line's comment states (``# exit 1: blocked``), else 0.
  A command that names something this machine does not have (a model
  directory, a hub model, a serving engine, an input file of the user's) runs
  as ``--help``: its options were checked above.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from gate.cli import main
from gate.commands.group import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_INLINE = re.compile(r"`(gate [^`]+)`")
_EXPECTED_EXIT = re.compile(r"#.*\bexit (\d)\b")
#: Commands that never load a model: they run as written.
NO_MODEL = {
    ("baseline", "list"),
    ("baseline", "show"),
    ("compare",),
    ("init",),
    ("merge",),
    ("import",),
    ("audit", "latency"),
}


@dataclass(frozen=True)
class DocCommand:
    """One command line of the docs: where it is and its words."""

    where: str
    text: str
    fenced: bool

    @property
    def expected_exit(self) -> int:
        match = _EXPECTED_EXIT.search(self.text)
        return int(match.group(1)) if match else 0

    @property
    def argv(self) -> list[str]:
        """The words after ``gate``: shell comments cut, ``[optional]`` brackets dropped."""
        words = shlex.split(self.text, comments=True)
        words = [w for w in (w.strip("[]") for w in words) if w]
        assert words[0] == "gate", self.where
        return words[1:]


def _fenced(path: Path) -> list[DocCommand]:
    found: list[DocCommand] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    block: list[tuple[int, str]] | None = None
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("```"):
            if block is not None:
                found.extend(_commands_of(path, block))
                block = None
            else:
                block = []
        elif block is not None:
            block.append((number, line))
    return found


def _commands_of(path: Path, block: list[tuple[int, str]]) -> list[DocCommand]:
    prompted = any(line.startswith("$ ") for _, line in block)
    out: list[DocCommand] = []
    index = 0
    while index < len(block):
        number, line = block[index]
        text = line[2:] if prompted and line.startswith("$ ") else (None if prompted else line)
        if text is not None and text.startswith("gate "):
            while text.rstrip().endswith("\\") and index + 1 < len(block):
                index += 1
                text = text.rstrip()[:-1] + " " + block[index][1].strip()
            out.append(DocCommand(f"{path.name}:{number}", text, fenced=True))
        index += 1
    return out


def _inline(path: Path) -> list[DocCommand]:
    found: list[DocCommand] = []
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            found.extend(
                DocCommand(f"{path.name}:{number}", m.group(1), fenced=False)
                for m in _INLINE.finditer(line)
            )
    return found


FENCED = [c for path in DOCS for c in _fenced(path)]
INLINE = [c for path in DOCS for c in _inline(path)]


def _resolve(argv: list[str]) -> tuple[tuple[str, ...], click.Command, list[str]]:
    """The command path, the click command and the words after it."""
    command: click.Command = cli
    path: list[str] = []
    rest = list(argv)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        assert sub is not None, f"gate {' '.join(path)} has no command {rest[0]!r}"
        path.append(rest.pop(0))
        command = sub
    return tuple(path), command, rest


def _flags(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def test_the_docs_hold_commands_to_check() -> None:
    assert len(FENCED) >= 30 and len(INLINE) >= 60
    paths = {_resolve(c.argv)[0] for c in FENCED}
    assert {("run",), ("init",), ("compare",), ("merge",), ("baseline", "record")} <= paths


@pytest.mark.parametrize("doc", FENCED + INLINE, ids=lambda c: c.where)
def test_each_command_names_a_real_command_and_its_options(doc: DocCommand) -> None:
    text = doc.text.split(" ...")[0] if not doc.fenced else doc.text
    words = [w for w in shlex.split(text.replace("...", ""), comments=True) if w][1:]
    words = [w.strip("[]") for w in words if w.strip("[]")]
    if words and words[-1].endswith(":"):  # an output line's "gate run --dry-run: ..."
        words[-1] = words[-1][:-1]
    path, command, rest = _resolve(words)
    unknown = sorted(
        w.split("=")[0]
        for w in rest
        if w.startswith("-") and w.split("=")[0] not in _flags(command)
    )
    assert not unknown, f"{doc.where}: gate {' '.join(path)} has no option {', '.join(unknown)}"


@pytest.mark.parametrize("doc", FENCED, ids=lambda c: c.where)
def test_each_fenced_command_parses(doc: DocCommand) -> None:
    path, command, rest = _resolve(doc.argv)
    if "--help" in rest or isinstance(command, click.Group):
        return
    with command.make_context(f"gate {' '.join(path)}", list(rest)) as _ctx:
        pass


# ----------------------------------------------------------------------------- running them


#: Options whose value is something the command writes.
OUTPUT_OPTIONS = {"--json", "--out", "--html", "--junit", "--markdown", "--plot", "--json-dir"}
#: Options whose value is a serving engine (a command line or a URL).
ENGINE_OPTIONS = {"--serve", "--endpoint", "--baseline-serve", "--baseline-endpoint"}


def _looks_like_a_path(word: str) -> bool:
    return word.startswith(("./", "/")) or word.endswith((".jsonl", ".json", ".toml", "/"))


def _missing_here(path: tuple[str, ...], argv: list[str], sandbox: Path) -> list[str]:
    """What the command names that this machine (the scratch copy) does not have."""
    import json

    document = json.loads((sandbox / "baselines" / "demo" / "refs.json").read_text())
    refs = set(document["refs"])
    missing: list[str] = []
    for index, word in enumerate(argv):
        previous = argv[index - 1] if index else ""
        if previous in OUTPUT_OPTIONS:
            continue
        if previous in ENGINE_OPTIONS or "$" in word:
            missing.append(f"{previous} {word}")
        elif previous in ("--model", "--candidate"):
            if path != ("init",) and word != "demo" and not (sandbox / word).exists():
                missing.append(word)  # a model this machine does not have
        elif previous == "--against":
            if word not in refs | {"latest"}:
                missing.append(f"baseline ref {word}")  # recorded by an earlier command
        elif _looks_like_a_path(word) and not (sandbox / word).exists():
            missing.append(word)
    return missing


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs-sandbox")
    for name in ("gate.toml", "thresholds.toml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "examples", root / "examples")
    (root / "baselines").mkdir()
    # the committed store's demo entry (read only: no command run here writes a store)
    (root / "baselines" / "demo").symlink_to((ROOT / "baselines" / "demo").resolve())
    return root


@pytest.mark.slow
@pytest.mark.parametrize("doc", FENCED, ids=lambda c: c.where)
def test_each_fenced_command_runs_here(
    doc: DocCommand, sandbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, command, rest = _resolve(doc.argv)
    work = tmp_path / "repo"
    if path == ("init",):  # a team's repository before gate init: empty
        work.mkdir()
    else:
        shutil.copytree(sandbox, work, symlinks=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    missing = _missing_here(path, rest, sandbox)
    has_dry_run = "--dry-run" in _flags(command)
    if missing or isinstance(command, click.Group):
        argv, expected = [*path, "--help"], 0
    elif "--help" in rest or "--dry-run" in rest or "--matrix" in rest or path in NO_MODEL:
        argv, expected = list(doc.argv), doc.expected_exit
    elif has_dry_run:
        argv, expected = [*doc.argv, "--dry-run"], 0
    else:  # loads a model and has no dry run (gate demo, gate baseline record)
        argv, expected = [*path, "--help"], 0
    if "--json" in argv:  # the results JSON of a real run belongs to the scratch copy
        (work / "out").mkdir(exist_ok=True)
    code = main(argv)
    assert code == expected, f"{doc.where}: gate {' '.join(argv)} exited {code}, not {expected}"
