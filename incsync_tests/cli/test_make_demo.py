"""`make demo` installs what the demo needs and nothing else; the demo ends with the one command that
opens the UI on its instance, with the project's dagster.yaml and the demo's environment (`make ui`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from incsync.cli.demo import DEMO_PG_DSN_ENV, share_step, ui_command, write_config, write_ui_env

ROOT = Path(__file__).resolve().parents[2]


def _deps(what: str) -> list[str]:
    result = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "system-deps.sh"), what], capture_output=True,
                            text=True, timeout=60, env={"PATH": "/nonexistent", "INCSYNC_DEPS_DRY_RUN": "1"})
    assert result.returncode == 0, result.stderr
    return result.stdout.removeprefix("would install:").split()


def test_the_demo_needs_java_only_and_the_tests_the_rest() -> None:
    assert _deps("demo") == ["openjdk-17-jre-headless"]
    test = _deps("test")
    assert {"openjdk-17-jre-headless", "chromium", "mariadb-client"} <= set(test)


def _make_n(target: str, *variables: str) -> str:
    # Under `make test PYTEST_ARGS=...` the outer make's variables reach this one through MAKEFLAGS: not here.
    env = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(["make", "-n", target, "VENV=/nonexistent-venv", *variables], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_demo_installs_without_test_extras_and_make_ui_uses_the_projects_dagster_yaml() -> None:
    demo = _make_n("demo")
    assert "scripts/system-deps.sh demo" in demo
    assert "pip install --quiet -e .\n" in demo and "[test]" not in demo
    test = _make_n("test")
    assert "scripts/system-deps.sh test" in test and "-e '.[test,postgres]'" in test
    ui = _make_n("ui")
    assert 'incsync dagster-yaml -c "demo/incsync.yaml" --base dagster.yaml -o "demo/.dagster/dagster.yaml"' in ui
    assert '. "demo/ui.env"' in ui  # the demo's DSN reaches the runs the UI launches
    assert "dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000" in ui
    assert "-p 3001" in _make_n("ui", "UI_PORT=3001")  # another port when 3000 is taken


def test_make_test_deselects_the_slow_tests_and_make_test_long_runs_them() -> None:
    [fast] = [line for line in _make_n("test").splitlines() if " -m pytest " in line]
    [long] = [line for line in _make_n("test-long").splitlines() if " -m pytest " in line]
    assert fast == '/nonexistent-venv/bin/python -m pytest -q -n 2 --dist loadfile -m "not slow" --durations=25 '
    assert long == "INCSYNC_HYPOTHESIS_PROFILE=long /nonexistent-venv/bin/python -m pytest -q -s -m slow "


def test_ui_env_holds_a_derived_dsn_and_never_one_you_exported(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(DEMO_PG_DSN_ENV, "postgresql://postgres@127.0.0.1:5432/incsync_demo")
    write_ui_env(tmp_path, derived_dsn=True)
    assert (tmp_path / "ui.env").read_text().splitlines()[1:] == [
        f"{DEMO_PG_DSN_ENV}=postgresql://postgres@127.0.0.1:5432/incsync_demo"
    ]
    monkeypatch.setenv(DEMO_PG_DSN_ENV, "postgresql://me:s3cret@db:5432/x")
    write_ui_env(tmp_path, derived_dsn=False)
    assert "s3cret" not in (tmp_path / "ui.env").read_text()
    command = ui_command(tmp_path)
    home = tmp_path.resolve() / ".dagster"
    assert command.startswith(f"incsync dagster-yaml -c {tmp_path.resolve()}/incsync.yaml --base dagster.yaml "
                              f"-o {home}/dagster.yaml && ")
    assert command.endswith(f"DAGSTER_HOME={home} dagster dev -w workspace.yaml")
    assert os.path.basename(command.split(" . ")[1].split(" ")[0]) == "ui.env"


def test_without_a_delta_copy_the_demo_says_how_to_see_the_share(tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path, start_epoch=1_700_000_000, postgres=False, acme="duckdb")
    assert share_step(tmp_path, config, source=None) is True  # type: ignore[arg-type]  # no copy to compare
    assert capsys.readouterr().out.splitlines()[1:] == [
        "4. a recipient reads its copy where it works: Delta Sharing (docs/sharing.md)",
        "  no recipient's copy here is a Delta table, which Delta Sharing serves: run `incsync demo` with acme's "
        "default destination to see it (Iceberg copies: `incsync share create` and pyiceberg, docs/sharing.md)",
    ]
    assert list(tmp_path.glob("*.share")) == []
