"""A server command's secrets are masked wherever gate records or shows it, never where it runs.

The rule (gate/engines/secrets.py) over every spelling an engine accepts: vLLM's
and llama-server's ``--api-key KEY``, ``--api-key=KEY``, ``--api_key``,
``--hf-token`` (a bare one in vLLM), llama-server's ``-hft``, several keys
after one option, repeated options, a key that starts with a dash,
``NAME=VALUE`` environment assignments, URL user-info and query tokens, a
command nested in ``sh -c``; and what it must leave alone (``--api-key-file
PATH``, ``--ssl-key-file PATH``, ``--max-num-batched-tokens N``). Then the
places the rule is applied: a started server (the stand-in engine of
tests/fakes/engine_process.py gets the real key and checks it; its log, which
echoes its arguments, is scrubbed once it stops; its provenance and its failure
line are masked), ``gate run --dry-run``'s description, and a missing server
program's error line. The real engines (vLLM, llama-server) run the end-to-end
checks in tests/test_engine_secrets.py.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from gate.engines.http import HTTPBackend
from gate.engines.opening import open_engine
from gate.engines.secrets import (
    MASK,
    mask_argv,
    mask_command,
    mask_url,
    scrub_file,
    scrub_text,
    secret_values,
)
from gate.engines.serve import ManagedServer
from gate.engines.settings import EngineSettings
from gate.errors import ConfigError, ExitCode, ModelLoadError
from gate.models.model_spec import ModelSpec
from tests.cli_support import run_gate

KEY = "sk-gate-masking-test-5a1f"
ENGINE = str(Path(__file__).parent / "fakes" / "engine_process.py")

CASES = [
    # vLLM: the option and its value as two words, with '=', with underscores, in capitals
    ("vllm serve m --api-key s3cretK --port 8000", "vllm serve m --api-key *** --port 8000"),
    ("vllm serve m --api-key=s3cretK", "vllm serve m --api-key=***"),
    ("vllm serve m --api_key s3cretK", "vllm serve m --api_key ***"),
    ("vllm serve m --API_KEY=s3cretK", "vllm serve m --API_KEY=***"),
    # vLLM's parser takes unambiguous abbreviations
    ("vllm serve m --api-k s3cretK --hf-tok=hf_s3cretH", "vllm serve m --api-k *** --hf-tok=***"),
    ("vllm serve m --watermark-config '{\"key\": 1}'", "vllm serve m --watermark-config ***"),
    # vLLM takes several keys after one --api-key
    (
        "vllm serve m --api-key s3cretK s3cretB --dtype float32",
        "vllm serve m --api-key *** *** --dtype float32",
    ),
    # repeated options: every occurrence
    (
        "s --api-key s3cretK --api-key=s3cretB --api-key s3cretC",
        "s --api-key *** --api-key=*** --api-key ***",
    ),
    # llama-server takes the next word verbatim, a leading dash included
    ("llama-server -m f.gguf --api-key -s3cretK", "llama-server -m f.gguf --api-key ***"),
    ("llama-server --api-key --s3cretK", "llama-server --api-key ***"),
    ("llama-server --api-key s3cretA,s3cretB", "llama-server --api-key ***"),
    # Hugging Face tokens: vLLM's --hf-token (its value may be left out), llama-server's -hft
    ("vllm serve m --hf-token hf_s3cretH", "vllm serve m --hf-token ***"),
    ("llama-server -hft hf_s3cretH -m f", "llama-server -hft *** -m f"),
    ("vllm serve m --hf-token --api-key s3cretK", "vllm serve m --hf-token --api-key ***"),
    # other credential-named options (SGLang's admin key, a TLS key's password)
    (
        "s --admin-api-key s3cretK --ssl-keyfile-password s3cretP",
        "s --admin-api-key *** --ssl-keyfile-password ***",
    ),
    # environment assignments before the program (through env) or anywhere
    (
        "env HF_TOKEN=hf_s3cretH OPENAI_API_KEY=s3cretK VLLM_CPU_KVCACHE_SPACE=1 vllm serve m",
        "env HF_TOKEN=*** OPENAI_API_KEY=*** VLLM_CPU_KVCACHE_SPACE=1 vllm serve m",
    ),
    ("env AWS_SECRET_ACCESS_KEY=s3cretK x", "env AWS_SECRET_ACCESS_KEY=*** x"),
    # credentials in URLs: a password, a token as the whole user-info, a token parameter
    (
        "llama-server --model-url https://user:s3cretK@host/m.gguf",
        "llama-server --model-url https://user:***@host/m.gguf",
    ),
    ("llama-server -mu=https://s3cretK@host/m.gguf", "llama-server -mu=https://***@host/m.gguf"),
    ("x --url https://host/m?token=s3cretK&rev=main", "x --url https://host/m?token=***&rev=main"),
    # a command nested in one word (that word re-quoted for the shell)
    ("sh -c 'vllm serve m --api-key s3cretK'", "sh -c vllm serve m --api-key '***'"),
]

#: Commands nothing is masked in: paths of key files, names that only contain "key" or
#: "token", options with values after a secret option's value.
UNTOUCHED = [
    "vllm serve m --hf-token --enforce-eager",  # vLLM's bare --hf-token: the login's token
    "llama-server -m f.gguf --api-key-file /run/keys.txt --ssl-key-file /tls/key.pem "
    "--ssl-cert-file /tls/cert.pem --port 8080",
    "vllm serve m --ssl-keyfile /tls/key.pem --ssl-certfile /tls/c.pem --max-num-batched-tokens "
    "256 --max-logprobs 20 --kv-cache-dtype fp8 --tokenizer ./tok --cors-credentials",
    "env LLAMA_ARG_API_KEY_FILE=/run/keys VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 vllm serve m",
    "x --endpoint http://127.0.0.1:8000/v1 --key /tls/key.pem --model-url https://host/m?rev=main",
    "python -m vllm.entrypoints.openai.api_server --model m --served-model-name demo",
    "vllm serve m --api-server-count 2 --hf-overrides {} --hf-config-path p",
]


@pytest.mark.parametrize(("command", "expected"), CASES)
def test_every_spelling_is_masked_and_the_option_kept(command: str, expected: str) -> None:
    argv = shlex.split(command)
    masked = mask_argv(argv)
    assert " ".join(masked) == expected
    assert len(masked) == len(argv)  # one word for one word: options keep their places
    values = secret_values(argv)
    assert values, command
    for value in values:
        assert value not in " ".join(masked).replace(MASK, "")
    assert mask_argv(masked) == masked  # masking twice changes nothing
    assert secret_values(masked) == ()


@pytest.mark.parametrize("command", UNTOUCHED)
def test_nothing_is_masked_without_a_secret(command: str) -> None:
    argv = shlex.split(command)
    assert mask_argv(argv) == argv and secret_values(argv) == ()
    assert mask_command(command) == command  # not even re-quoted


def test_the_values_masked_are_listed_for_scrubbing() -> None:
    argv = shlex.split("s --api-key K1 K2 --hf-token=hf_T env HF_TOKEN=hf_E --url https://u:P@h")
    assert set(secret_values(argv)) == {"K1", "K2", "hf_T", "hf_E", "P"}
    assert scrub_text("keys K1 and K2, P@h", secret_values(argv)) == "keys *** and ***, ***@h"


def test_text_commands_and_urls() -> None:
    assert mask_command(f"vllm serve m --api-key {KEY}") == "vllm serve m --api-key '***'"
    assert mask_command("vllm serve m --port 1") == "vllm serve m --port 1"
    assert mask_command(f"vllm serve 'm --api-key {KEY}") == "vllm ***"  # unbalanced quote
    assert mask_url(f"http://user:{KEY}@h:8000/v1") == "http://user:***@h:8000/v1"
    assert mask_url("http://h:8000/v1") == "http://h:8000/v1"


def test_scrub_file_rewrites_only_a_file_that_holds_a_value(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"args: {{'api_key': ['{KEY}']}}\nready\n")
    log.chmod(0o640)
    assert scrub_file(log, (KEY,))
    assert log.read_text() == "args: {'api_key': ['***']}\nready\n"
    assert log.stat().st_mode & 0o777 == 0o640
    stamp = log.stat().st_mtime_ns
    assert not scrub_file(log, (KEY,)) and log.stat().st_mtime_ns == stamp
    assert not scrub_file(tmp_path / "missing.log", (KEY,))
    assert list(tmp_path.iterdir()) == [log]  # no temporary file left


def _serve_command() -> str:
    return shlex.join([sys.executable, ENGINE, "--api-key", KEY, "--child"])


def test_a_started_server_gets_the_key_and_gate_records_only_the_mask(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in engine refuses requests without its key (so it got the real one) and
    echoes its arguments into its log unmasked, as an engine may; gate's record, and the log
    once the server stops, hold the mask, and the process's own command line the key."""
    import psutil

    monkeypatch.setenv("GATE_MASKING_KEY", KEY)
    engine = EngineSettings(serve=_serve_command(), api_key_env="GATE_MASKING_KEY")
    log = tmp_path / "server.log"
    with open_engine(ModelSpec.parse(str(tiny_model_dir)), engine, log_path=log) as backend:
        assert isinstance(backend, HTTPBackend)
        assert backend.connect().model == "stand-in"  # /v1/models answered: the key matched
        recorded = list(backend.provenance().serve_command or ())
        assert recorded[recorded.index("--api-key") + 1] == MASK and KEY not in recorded
        running = [
            p.info["cmdline"]
            for p in psutil.process_iter(["cmdline"])
            if ENGINE in (p.info["cmdline"] or ())
        ]
        assert running and all(KEY in cmd for cmd in running)  # the real argv ran
        assert KEY in log.read_text()  # the engine echoed it while running
    text = log.read_text()
    assert KEY not in text and "'api_key': '***'" in text


def test_without_the_key_the_stand_in_refuses(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The check above is a real one: a client without the key is refused (exit 4)."""
    engine = EngineSettings(serve=_serve_command())
    with (
        pytest.raises(ConfigError) as info,
        open_engine(ModelSpec.parse(str(tiny_model_dir)), engine, log_dir=tmp_path) as backend,
    ):
        backend.connect()
    assert "401" in info.value.format_line() and KEY not in info.value.format_line()


def test_a_failing_server_quotes_its_log_masked(tmp_path: Path) -> None:
    script = "import sys; print('RuntimeError: bad key ' + sys.argv[2]); sys.exit(2)"
    command = [sys.executable, "-c", script, "--api-key", KEY]
    server = ManagedServer(command, log_path=tmp_path / "s.log")
    assert server.argv[4] == KEY and server.recorded_argv[4] == MASK
    assert KEY not in server.command_text and "--api-key" in server.command_text
    with pytest.raises(ModelLoadError) as info:
        server.start()
    line = info.value.format_line()
    assert "RuntimeError: bad key ***" in line and KEY not in line
    assert KEY not in (tmp_path / "s.log").read_text()


def test_dry_run_shows_the_command_masked(tmp_path: Path) -> None:
    serve = shlex.join([sys.executable, "-m", "vllm", "serve", "m", "--api-key", KEY])
    baseline = shlex.join([sys.executable, "-m", "vllm", "serve", "b", f"--api-key={KEY}"])
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--against",
        "fp32",
        "--tiers",
        "fidelity",
        "--serve",
        serve,
        "--baseline-serve",
        baseline,
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr
    assert "--api-key '***'" in done.stdout and "'--api-key=***'" in done.stdout


def test_missing_server_program_is_named_masked(tmp_path: Path) -> None:
    """``HF_TOKEN=... vllm serve`` is no program gate can start: its line names the word
    it tried, masked."""
    done = run_gate(
        "run",
        "--candidate",
        "demo",
        "--against",
        "fp32",
        "--serve",
        f"HF_TOKEN={KEY} vllm serve m",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr
    assert "'HF_TOKEN=***' was not found" in done.stdout + done.stderr
