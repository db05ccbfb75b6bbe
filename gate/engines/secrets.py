"""Credentials on a server command line, masked before gate records or shows the command.

Engines take keys and tokens as options (vLLM's and llama-server's
``--api-key KEY``, ``--hf-token TOKEN``), and a command line may set one in
the environment (``env HF_TOKEN=... vllm serve``) or carry one in a URL
(``https://user:TOKEN@host/...``). gate runs the command as given and records
it (provenance, baselines, reports, messages) only as :func:`mask_argv`
returns it: every secret value replaced by :data:`MASK`, every option kept,
so the record still says that a key was given and how.

The rule, token by token:

* **Secret options.** An option is secret when its name (``--`` or ``-``
  stripped, lower case, underscores read as dashes, as vLLM's and llama.cpp's
  parsers read them; vLLM's abbreviations such as ``--api-k`` too) is one of
  :func:`secret_options` or ends with one of :data:`SECRET_SUFFIXES` after a
  dash (``--admin-api-key``, ``--ssl-keyfile-password``); ``--api-key-file
  PATH`` and ``--ssl-key-file PATH`` name files and are kept.
  ``--name=VALUE`` becomes ``--name=***``. ``--name VALUE``: the next token
  is masked whatever it looks like
  (llama-server takes it verbatim, ``-`` included), except for an option whose
  value may be left out (:func:`optional_value`: vLLM's bare ``--hf-token``),
  whose next token is kept when it starts with ``-``; the tokens after it that
  do not start with ``-`` are masked too (vLLM's ``--api-key K1 K2``: a
  positional word after them is read by vLLM as a key as well). Every
  occurrence is masked, repeated options included.
* **Environment assignments.** A token ``NAME=VALUE`` whose ``NAME`` is an
  environment variable's name ending in a secret suffix (``HF_TOKEN``,
  ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``) becomes ``NAME=***``.
* **URLs.** A token (or an option's value) that is a URL keeps its user name
  and loses its password (``https://user:***@host``; a user-info without a
  password, GitHub's ``https://TOKEN@host``, is masked whole) and the values of
  its query parameters with secret names (``?token=***``).
* **Nested commands.** A token holding a whole command (``sh -c "vllm serve ...
  --api-key K"``) is masked by the same rule, word by word.

:func:`secret_values` lists what was masked, so text that may quote a value
(the server's own log, where an engine may echo its arguments; vLLM 0.32
masks its own) can be scrubbed with :func:`scrub_text` and :func:`scrub_file`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

#: What a secret value is replaced by.
MASK = "***"

#: Names that carry a credential whatever the engine: ``--api-key`` and a bare ``--token``,
#: ``--secret``, ``--password`` (a bare ``--key`` is often a TLS key's path, so it is not
#: among them); each engine's dialect names its own beside them (``--hf-token``,
#: ``--watermark-config`` ...: :attr:`gate.engines.dialect.EngineDialect.secret_options`).
GENERIC_SECRET_OPTIONS: frozenset[str] = frozenset(
    {"api-key", "token", "secret", "password", "passwd"}
)
#: Any option, environment variable or URL query parameter whose name ends with one of
#: these after a dash or an underscore carries a credential too (``--admin-api-key``,
#: ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``); ``--api-key-file`` ends in ``file`` and is kept.
SECRET_SUFFIXES: tuple[str, ...] = ("key", "token", "secret", "password", "passwd")


def secret_options() -> frozenset[str]:
    """Every name that carries a credential: the generic ones and every registered engine's."""
    from gate.engines.registry import engine_secret_options as engines

    return GENERIC_SECRET_OPTIONS | engines()[0]


def optional_value() -> frozenset[str]:
    """Secret options whose value may be left out (vLLM's ``--hf-token`` alone means the
    token of ``huggingface-cli login``): a next token starting with ``-`` is an option."""
    from gate.engines.registry import engine_secret_options as engines

    return engines()[1]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _secret_name(name: str) -> bool:
    """Whether an option's or a variable's bare name (no dashes) names a credential."""
    words = re.split(r"[-_]", name.lower())
    joined = "-".join(words)
    return joined in secret_options() or (len(words) > 1 and words[-1] in SECRET_SUFFIXES)


def _option_name(token: str) -> str | None:
    """The bare name of an option token (``--api_key`` -> ``api-key``), else None."""
    if token.startswith("--") and len(token) > 2:
        return token[2:].lower().replace("_", "-")
    if token.startswith("-") and len(token) > 1 and not token[1].isdigit():
        return token[1:].lower().replace("_", "-")
    return None


def _secret_option(word: str) -> str | None:
    """The name of the secret option ``word`` spells (no ``=VALUE``), else None.

    Spellings: any case, underscores for dashes, and the abbreviations vLLM's
    parser accepts (``--api-k`` for ``--api-key``: a prefix of a listed name
    that goes past its first dash).
    """
    name = _option_name(word)
    if name is None or "=" in name:
        return None
    if _secret_name(name):
        return name
    if word.startswith("--"):
        for full in sorted(secret_options()):
            head, dash, _ = full.partition("-")
            if dash and full.startswith(name) and len(name) > len(head) + 1:
                return full
    return None


def _mask_url(text: str, found: list[str]) -> str:
    """``text`` with a URL's password (or whole token-like user-info) and secret-named
    query values masked; anything that is not such a URL comes back unchanged."""
    if not _URL.match(text):
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, password = userinfo.partition(":")
        if colon and password:
            found.append(password)
            netloc = f"{user}:{MASK}@{host}"
        elif userinfo:
            found.append(userinfo)
            netloc = f"{MASK}@{host}"
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_secret_name(k) for k, _ in pairs):
            masked = []
            for key, value in pairs:
                if _secret_name(key) and value:
                    found.append(value)
                    value = MASK
                masked.append((key, value))
            query = urlencode(masked, safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return text
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _mask_word(token: str, found: list[str]) -> str:
    """One token that is not a secret option's value: an assignment, a URL, a nested command."""
    name, eq, value = token.partition("=")
    if eq and value:
        bare = _option_name(name)
        if bare is not None and _secret_option(name) is not None:
            found.append(value)
            return f"{name}={MASK}"
        if bare is None and _ENV_NAME.match(name) and _secret_name(name):
            found.append(value)
            return f"{name}={MASK}"
        if bare is not None:
            return f"{name}={_mask_word(value, found)}"
    if any(c.isspace() for c in token):
        try:
            words = shlex.split(token)
        except ValueError:
            words = []
        if len(words) > 1:
            inner = _mask(words, found)
            return shlex.join(inner) if inner != words else token
    return _mask_url(token, found)


def _mask(words: Sequence[str], found: list[str]) -> list[str]:
    argv = [str(w) for w in words]
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name = _secret_option(token)
        if name is None:
            out.append(_mask_word(token, found))
            i += 1
            continue
        out.append(token)
        i += 1
        if i < len(argv) and not (name in optional_value() and argv[i].startswith("-")):
            found.append(argv[i])
            out.append(MASK)
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                found.append(argv[i])
                out.append(MASK)
                i += 1
    return out


def mask_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as gate records it: every secret value replaced by :data:`MASK`."""
    return _mask(argv, [])


def secret_values(argv: Sequence[str]) -> tuple[str, ...]:
    """The values :func:`mask_argv` masks in ``argv``, longest first, without repeats."""
    found: list[str] = []
    _mask(argv, found)
    return tuple(sorted({v for v in found if v and v != MASK}, key=len, reverse=True))


def mask_command(command: str) -> str:
    """A command line as text, masked (re-quoted only when something was masked).

    A command that cannot be split into words (unbalanced quotes) is shown as
    its program's first word and :data:`MASK`: it is refused before it runs,
    and its words cannot be told apart to mask them one by one.
    """
    try:
        argv = shlex.split(command)
    except ValueError:
        head = command.split(maxsplit=1)
        return f"{head[0]} {MASK}" if head else command
    masked = mask_argv(argv)
    return command if masked == argv else shlex.join(masked)


def mask_url(url: str) -> str:
    """A URL (an endpoint) with its password or token-like user-info and its secret-named
    query values masked."""
    return _mask_url(url, [])


def scrub_text(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``values`` replaced by :data:`MASK`."""
    for value in sorted(set(values), key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    return text


def scrub_file(path: Path, values: Sequence[str]) -> bool:
    """Rewrite the text file at ``path`` with ``values`` masked (atomically, only when one
    occurs); whether it was rewritten. An unreadable or missing file is left alone."""
    if not values:
        return False
    try:
        data = path.read_bytes()
    except OSError:
        return False
    needles = [v.encode("utf-8", errors="surrogateescape") for v in values if v]
    if not any(n in data for n in needles):
        return False
    for needle in sorted(set(needles), key=len, reverse=True):
        data = data.replace(needle, MASK.encode())
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


__all__ = [
    "GENERIC_SECRET_OPTIONS",
    "MASK",
    "SECRET_SUFFIXES",
    "mask_argv",
    "mask_command",
    "mask_url",
    "optional_value",
    "scrub_file",
    "scrub_text",
    "secret_options",
    "secret_values",
]
