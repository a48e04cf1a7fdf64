"""The README cannot rot: its quickstart's commands parse (fast), and run from a clean copy (slow)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from incsync.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.mark.slow
def test_the_quickstart_runs_in_a_clean_copy(tmp_path: Path) -> None:
    """The incsync commands of the quickstart, run as written in a fresh copy of the repository's files
    (`make demo` and `make ui` install and serve: `make -n` checks them here, `make demo` itself is the demo)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    clone = tmp_path / "incsync"
    for name in filter(None, files.split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    (clone / ".venv").symlink_to(Path(sys.executable).parents[1])  # the installed environment `make demo` creates
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "INCSYNC_CONFIG")}
    env["PYTHONPATH"] = str(clone)
    for command in quickstart():
        if command.startswith("make "):
            argv = ["make", "-n", *shlex.split(command)[1:]]
        else:
            argv = ["bash", "-c", command]
        result = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    out = clone / "examples" / "lake-to-delta" / "out"
    from deltalake import DeltaTable

    assert sorted(DeltaTable(str(out / "acme" / "orders")).to_pyarrow_table().column("id").to_pylist()) == [1, 2, 4]
    assert sorted(DeltaTable(str(out / "globex" / "orders")).to_pyarrow_table().column("id").to_pylist()) == [3, 5]
