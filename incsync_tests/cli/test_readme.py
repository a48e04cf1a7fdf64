"""The README cannot rot: its quickstart's commands parse (fast), and run from a clean copy (slow)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from incsync.cli.demo import DEMO_PG_DSN_ENV, run_demo
from incsync.cli.main import build_parser
from incsync_tests.support.browser import wait_for_http
from incsync_tests.support.destinations import postgres_database
from incsync_tests.support.host import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def quickstart() -> list[str]:
    text = README.read_text()
    block = re.search(r"<!-- quickstart[^>]*-->\s*```bash\n(.*?)```\s*<!-- /quickstart -->", text, re.S)
    assert block, "README.md lost its quickstart block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_stands_alone() -> None:
    text = README.read_text()
    assert "../shared" not in text and "DESIGN.md" not in text
    for link in re.findall(r"\]\(((?!https?://)[^)]+)\)", text):
        assert (ROOT / link).exists(), f"README links to {link}, which is not in the repository"


def test_the_quickstart_is_five_commands_that_parse() -> None:
    commands = quickstart()
    assert len(commands) == 5
    for command in commands:
        argv = shlex.split(command)
        if argv[0] == "make":
            made = subprocess.run(["make", "-n", *argv[1:], "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=60)
            assert made.returncode == 0, f"{command}: {made.stderr}"
        else:
            assert argv[0] == ".venv/bin/incsync", command
            args = build_parser().parse_args(argv[1:])  # exits on a bad line
            assert (ROOT / args.config).exists(), f"{command}: {args.config} is not in the repository"


def test_the_demo_transfers_and_verifies_every_recipient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, spark) -> None:
    """What `make demo` runs, in this process (make test); the quickstart as written, in a clean copy with
    cold processes and `make ui`, is the slow test below."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))  # the demo points it at its own instance
    with postgres_database() as dsn:
        monkeypatch.setenv(DEMO_PG_DSN_ENV, dsn)
        assert run_demo(tmp_path / "demo", rows=20_000) == 0
    out = capsys.readouterr().out
    assert "demo in " in out and ": 20000 orders over " in out
    assert "destinations: acme -> delta, globex -> postgres, initech -> object_storage" in out
    assert "\nverified: every recipient holds exactly its tenant's rows" in out, out[-2000:]
    assert "MISMATCH" not in out and "FAILED" not in out
    assert (tmp_path / "demo" / "ui.env").exists()
    # it ends with acme's Delta Sharing profile, read back through the server, and how to read it with pandas
    assert "\n4. a recipient reads its copy where it works: Delta Sharing (docs/sharing.md)\n" in out
    read = re.search(r"read back through `incsync serve` with delta-sharing: (\d+) rows, exactly acme's (\d+)\n", out)
    assert read is not None and read.group(1) == read.group(2), out[-2000:]
    profile_file = tmp_path / "demo" / "acme.share"
    profile = json.loads(profile_file.read_text())
    assert profile["endpoint"] == "http://127.0.0.1:8088/delta-sharing"
    assert profile["bearerToken"].startswith("incsync_st_") and profile["bearerToken"] not in out
    assert profile_file.stat().st_mode & 0o777 == 0o600
    assert out.rstrip().splitlines()[-1] == (f"    .venv/bin/python -c \"import delta_sharing; print(delta_sharing.load_as_pandas("
                                             f"'{profile_file.resolve()}#acme.sales.orders'))\"")


def _clean_copy(tmp_path: Path) -> Path:
    """The repository's files in a fresh folder, with a `.venv` that `make` takes as installed: its scripts
    are the test environment's (no pip, so a stale stamp fails instead of installing into that environment)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    clone = tmp_path / "incsync"
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for script in ("python", "incsync", "dagster", "dagster-webserver"):
        (bin_dir / script).symlink_to(Path(sys.executable).parent / script)
    digest = hashlib.sha1((clone / "pyproject.toml").read_bytes()).hexdigest()[:12]  # the Makefile's HASH
    (clone / ".venv" / f".installed-demo-{digest}").touch()
    return clone


def _default_sigint() -> None:
    """In the child: Ctrl-C's default action even when this process ignores SIGINT (a background job), so
    `dagster dev`, which maps SIGTERM to its SIGINT handler, stops when asked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _serve_ui(clone: Path, env: dict[str, str], command: str) -> None:
    """`make ui` on a free port: the webserver answers over the demo's instance, then Ctrl-C stops it all."""
    port = free_port()
    log = clone / "make-ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*shlex.split(command), f"UI_PORT={port}"], cwd=clone, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_default_sigint)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/server_info", proc, log, timeout=90)
        query = '{ assetOrError(assetKey: {path: ["shop", "orders"]}) { ... on Asset { assetMaterializations(limit: 1) { runId } } } }'
        request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", json.dumps({"query": query}).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        assert len(answer["data"]["assetOrError"]["assetMaterializations"]) == 1, answer  # the demo's runs
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends to the whole group
        try:
            proc.wait(timeout=30)  # make, reaped: a zombie would still count as the group's member
        except subprocess.TimeoutExpired:
            pass
        stopped = _wait_group_gone(proc.pid, timeout=15)
        if not stopped:
            os.killpg(proc.pid, signal.SIGKILL)
    assert stopped, f"make ui did not stop on Ctrl-C within 45 s:\n{log.read_text()[-2000:]}"


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.3)
    return False


@pytest.mark.slow  # ~60 s (a clean copy, cold CLI processes, `make ui`): make test-long; the demo itself runs in test_demo.py
def test_the_quickstart_runs_in_a_clean_copy(tmp_path: Path) -> None:
    """Every quickstart command, run as written in a fresh copy of the repository's files: `make demo`
    (its install step taken as done, see ``_clean_copy``), the incsync commands, then `make ui` until the
    UI answers over the demo's instance. The demo's PostgreSQL recipient gets a database of its own."""
    clone = _clean_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "INCSYNC_CONFIG", DEMO_PG_DSN_ENV)}
    env.update({"PYTHONPATH": str(clone), "INCSYNC_AUTOMATION": "stopped", "DAGSTER_DISABLE_TELEMETRY": "yes"})
    with postgres_database() as dsn:
        env[DEMO_PG_DSN_ENV] = dsn
        for command in quickstart():
            if command == "make ui":
                _serve_ui(clone, env, command)
                continue
            result = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True,
                                    timeout=600)
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            if command == "make demo":
                assert "destinations: acme -> delta, globex -> postgres, initech -> object_storage" in result.stdout
                assert "\nverified: every recipient holds exactly its tenant's rows" in result.stdout, result.stdout[-2000:]
                assert "open the UI on this instance: make ui" in result.stdout
    out = clone / "examples" / "lake-to-delta" / "out"
    from deltalake import DeltaTable

    assert sorted(DeltaTable(str(out / "acme" / "orders")).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 4]
    assert sorted(DeltaTable(str(out / "globex" / "orders")).to_pyarrow_table().column("id").to_pylist()) == [3, 5]
