"""incsync as a Dagster component in a user's own project, driven through the real `create-dagster` and `dg`
CLIs as docs/dagster.md tells a user to: scaffold it, name an incsync.yaml (a PostgreSQL source), add an asset of
the project's own downstream of an incsync model, then `dg check defs`, `dg list defs` and `dg launch`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import NamedTuple

import dagster as dg
import pytest
import yaml

from incsync.errors import ConfigError
from incsync.orchestration.component import IncsyncComponent, IncsyncScaffolder, IncsyncScaffoldParams
from incsync_tests.support.jdbc import jdbc_config, pg_database

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GROUP = "dagster_dg_cli.registry_modules"
PROJECT = "shop_analytics"
USER_ASSET = '''import dagster as dg


@dg.asset(deps=[dg.AssetKey(["db", "orders"])])
def orders_report() -> None:
    """The project's own asset, downstream of incsync's orders model."""
'''


def _declared_entry_points() -> dict[str, str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][GROUP]


def _registry_path(tmp_path: Path) -> list[str]:
    """Where `dg` finds pyproject's entry point: nowhere extra once incsync is installed from this pyproject
    (`make test` reinstalls when it changes); else a folder holding the entry points pyproject declares, as
    installing writes them, so a venv installed before they were declared still sees them."""
    if any(ep.value == "incsync" for ep in entry_points(group=GROUP)):
        return []
    info = tmp_path / "entry_points" / "incsync_dg_registry-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: incsync-dg-registry\nVersion: 0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in _declared_entry_points().items())
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}")
    return [str(info.parent)]


def _run(args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_pyproject_registers_the_component_under_dgs_entry_point_group() -> None:
    assert _declared_entry_points() == {"incsync": "incsync"}
    import incsync

    assert incsync.IncsyncComponent is IncsyncComponent
    assert "IncsyncComponent" in dir(incsync)  # how dg lists a registry module's objects


class Project(NamedTuple):
    root: Path
    home: Path
    env: dict[str, str]

    def dg(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run([str(BIN / "dg"), *args], cwd=self.root, env=self.env)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """A project made by `create-dagster`, incsync scaffolded into it with `dg` and pointed at an incsync.yaml
    reading a PostgreSQL database, and the project's own asset downstream of incsync's orders model."""
    tmp_path = tmp_path_factory.mktemp("dg")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    root = tmp_path / PROJECT
    env = {k: v for k, v in os.environ.items() if k not in ("INCSYNC_CONFIG", "PYTHONPATH")} | {
        "DAGSTER_HOME": str(home),
        "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",  # no PyPI look-up for a newer create-dagster
        # The project as `uv sync` / `pip install -e .` would make it importable, incsync from this checkout.
        "PYTHONPATH": os.pathsep.join([*_registry_path(tmp_path), str(ROOT), str(root / "src")]),
    }
    _run([str(BIN / "create-dagster"), "project", "--no-uv-sync", str(root)], cwd=tmp_path, env=env)
    with (root / "pyproject.toml").open("a") as toml:
        toml.write("\n[tool.dg.cli.telemetry]\nenabled = false\n")
    made = Project(root, home, env)
    with pg_database() as db:
        (tmp_path / "warehouse").mkdir()
        config = jdbc_config(tmp_path / "warehouse", db)
        folder = root / "src" / PROJECT / "defs" / "incsync"
        relative = os.path.relpath(config, folder)
        assert relative == "../../../../../warehouse/incsync.yaml"
        made.dg("scaffold", "defs", "incsync.IncsyncComponent", "incsync", "--config-path", relative)
        assert (folder / "defs.yaml").read_text() == (
            f"type: incsync.IncsyncComponent\n\nattributes:\n  config_path: {relative}\n"
        )
        (root / "src" / PROJECT / "defs" / "reports.py").write_text(USER_ASSET)
        yield made


def test_dg_lists_the_component(project: Project) -> None:
    listed = json.loads(project.dg("list", "components", "--json").stdout)
    assert {"key": "incsync.IncsyncComponent",
            "summary": "incsync's models as assets, with their sensors, schedules, checks, jobs and resources."
            } in listed["items"]


def test_dg_checks_and_lists_incsyncs_definitions_beside_the_users_asset(project: Project) -> None:
    checked = project.dg("check", "defs")
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr

    defs = json.loads(project.dg("list", "defs", "--json").stdout)
    source = f"src/{PROJECT}/defs/incsync/defs.yaml:1"
    assert {a["asset_key"]: (a["dependency_keys"], a.get("source")) for a in defs["assets"]} == {
        "db/orders": (["db/tables/db.orders"], source),
        "db/tables/db.orders": ([], source),
        "orders_report": (["db/orders"], None),
    }
    assert [(c["key"], c["source"]) for c in defs["asset_checks"]] == [("db/orders:integrity", source)]
    assert sorted((s["name"], s["source"]) for s in defs["sensors"]) == [
        ("incsync_reaper", source), ("incsync_recipients", source)]
    assert sorted((s["name"], s["cron_schedule"]) for s in defs["schedules"]) == [
        ("incsync_maintenance_schedule", "0 3 * * *"), ("incsync_orders_schedule", "*/15 * * * *")]
    assert sorted(j["name"] for j in defs["jobs"]) == ["incsync_maintenance", "orders"]
    assert sorted(r["name"] for r in defs["resources"]) == [
        "delta_destination", "incsync", "incsync_io_manager", "source_db", "spark"]


def test_the_users_asset_materializes_in_the_project_beside_incsync(project: Project) -> None:
    project.dg("launch", "--assets", "orders_report")
    with dg.DagsterInstance.from_config(str(project.home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("orders_report"))
        assert event is not None
        run = instance.get_run_by_id(event.run_id)
        assert run is not None and (run.job_name, run.status) == ("__ASSET_JOB", dg.DagsterRunStatus.SUCCESS)


def test_the_projects_definitions_load_in_process_with_the_lineage_edge(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the project's definitions.py returns (`load_from_defs_folder`), loaded in this process."""
    from dagster.components import load_from_defs_folder

    monkeypatch.syspath_prepend(str(project.root / "src"))
    try:
        defs = load_from_defs_folder(path_within_project=project.root / "src" / PROJECT)
        graph = defs.resolve_asset_graph()
        assert sorted(k.to_user_string() for k in graph.get(dg.AssetKey("orders_report")).parent_keys) == ["db/orders"]
        assert sorted(k.to_user_string() for k in graph.get(dg.AssetKey(["db", "orders"])).child_keys) == ["orders_report"]
        assert defs.resolve_job_def("orders").name == "orders"
    finally:
        for name in [m for m in sys.modules if m == PROJECT or m.startswith(f"{PROJECT}.")]:
            del sys.modules[name]


def test_scaffolding_without_a_path_names_incsync_yaml_beside_defs_yaml(tmp_path: Path) -> None:
    request = dg.ScaffoldRequest(type_name="incsync.IncsyncComponent", target_path=tmp_path, scaffold_format="yaml",
                                 project_root=None, params=IncsyncScaffoldParams())
    IncsyncScaffolder().scaffold(request)
    assert yaml.safe_load((tmp_path / "defs.yaml").read_text()) == {
        "type": "incsync.IncsyncComponent", "attributes": {"config_path": "incsync.yaml"}}


def test_the_config_path_is_relative_to_the_defs_folder_or_absolute(tmp_path: Path) -> None:
    folder = tmp_path / "defs" / "incsync"
    folder.mkdir(parents=True)
    (folder / "incsync.yaml").write_text("")
    (tmp_path / "other.yaml").write_text("")
    assert IncsyncComponent().config_file(folder) == folder / "incsync.yaml"
    assert IncsyncComponent(config_path="../../other.yaml").config_file(folder) == tmp_path / "other.yaml"
    assert IncsyncComponent(config_path=str(tmp_path / "other.yaml")).config_file(folder) == tmp_path / "other.yaml"
    with pytest.raises(ConfigError) as info:
        IncsyncComponent(config_path="missing.yaml").config_file(folder)
    assert info.value.located() == [
        f"{folder / 'missing.yaml'}: file not found; the incsync component's defs.yaml in {folder} names it as "
        "config_path: 'missing.yaml' (absolute, or relative to that folder): write the file there (`incsync init`) "
        "or change config_path"
    ]
