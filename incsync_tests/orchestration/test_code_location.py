"""`dagster dev` in the repo root of a fresh clone: with INCSYNC_CONFIG unset the workspace loads the
shipped example, and where there is none the code location's error says exactly what to set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from incsync.errors import ConfigError
from incsync.orchestration.definitions import EXAMPLE_CONFIG, config_for_code_location

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INCSYNC_CONFIG"}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**env, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}


def test_the_workspace_loads_the_example_without_incsync_config(tmp_path: Path) -> None:
    """What `dagster dev -w workspace.yaml` loads, checked by Dagster's own `definitions validate`."""
    dagster = str(Path(sys.executable).with_name("dagster"))
    result = subprocess.run([dagster, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                            env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "All code locations passed validation." in result.stderr + result.stdout
    assert (f"INCSYNC_CONFIG is not set and there is no incsync.yaml here, so the example {EXAMPLE_CONFIG} is loaded"
            in result.stderr)


def test_definitions_without_incsync_config_are_the_examples(tmp_path: Path) -> None:
    code = "import incsync.definitions as d; print(sorted(k.to_user_string() for k in d.defs.resolve_all_asset_keys()))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "['shop/orders', 'shop/tables/shop.orders']"


def test_without_any_config_the_error_says_what_to_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INCSYNC_CONFIG", raising=False)
    with pytest.raises(ConfigError) as info:
        config_for_code_location(cwd=tmp_path, example=tmp_path / "no-example.yaml")
    assert info.value.located() == [
        "incsync.yaml: file not found; export INCSYNC_CONFIG=/path/to/incsync.yaml before `dagster dev` "
        "(or write one here with `incsync init`)"
    ]
    (tmp_path / "incsync.yaml").write_text("")
    assert config_for_code_location(cwd=tmp_path, example=tmp_path / "no-example.yaml") is None
    monkeypatch.setenv("INCSYNC_CONFIG", "/somewhere/incsync.yaml")
    assert config_for_code_location(cwd=ROOT) is None
