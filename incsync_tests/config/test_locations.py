"""`validate` compares destinations by where they write: one location, one recipient (issue 22)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from incsync.cli.main import run_command
from incsync.config.load import load_config
from incsync.config.locations import resolved_path, storage_url
from incsync.errors import ConfigError

SOURCE = {"name": "lake", "vendor": "lake", "path": "./src"}
MODEL = {
    "model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
    "last_modified_column": "updated_at", "organization_column": "organization_id", "min_start_time_epoch": 1704067200,
}


def _write(folder: Path, destinations: list[dict[str, Any]], name: str = "incsync.yaml") -> Path:
    recipients = [
        {"id": rid, "id_in_provider_system": f"org_{i + 1}", "destination": d["name"]}
        for i, (rid, d) in enumerate(zip(("acme", "globex", "initech"), destinations, strict=False))
    ]
    file = folder / name
    file.write_text(yaml.safe_dump({"sources": [SOURCE], "destinations": destinations, "models": [MODEL], "recipients": recipients}))
    return file


def _problems(file: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(file)
    return info.value.problems


def _same(kind: str, a: str, b: str, shown: str) -> str:
    return (
        f'destinations[1]: "globex_{kind}" (recipient globex) writes to the same location as "acme_{kind}" '
        f"(recipient acme): {shown}; {'an' if kind in ('iceberg', 'files') else 'a'} {'object_storage' if kind == 'files' else kind} destination holds one "
        f'recipient\'s copy, so give "globex_{kind}" a location of its own'
    )


@pytest.mark.parametrize(
    ("second", "how"),
    [
        ("./out/shared/", "trailing slash"),
        ("./out/other/../shared", "dot-dot"),
        ("file://{root}/out/shared", "file URL"),
        ("{root}/out/shared", "absolute"),
        ("./link", "symlink"),
    ],
    ids=["trailing-slash", "dot-dot", "file-url", "absolute", "symlink"],
)
def test_two_delta_destinations_on_one_table_root_are_refused(tmp_path: Path, second: str, how: str) -> None:
    root = tmp_path.resolve()
    (root / "out" / "shared").mkdir(parents=True)
    (root / "link").symlink_to(root / "out" / "shared")
    file = _write(tmp_path, [
        {"name": "acme_delta", "kind": "delta", "path": "./out/shared"},
        {"name": "globex_delta", "kind": "delta", "path": second.format(root=root)},
    ])
    assert _problems(file) == [_same("delta", "acme_delta", "globex_delta", str(root / "out" / "shared"))], how
    assert not (root / "out" / "shared" / "orders").exists()  # nothing was written by either tenant


def test_validate_command_refuses_and_nothing_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = _write(tmp_path, [
        {"name": "acme_delta", "kind": "delta", "path": "./out/shared"},
        {"name": "globex_delta", "kind": "delta", "path": "./out/shared/"},
    ])
    assert run_command(["validate", "-c", str(file)]) == 2
    err = capsys.readouterr().err
    assert '"globex_delta" (recipient globex) writes to the same location as "acme_delta" (recipient acme)' in err
    assert run_command(["transfer", "orders", "--recipient", "globex", "-c", str(file), "--window", "2024-01-01"]) == 2
    assert not (tmp_path / "out").exists()


def test_two_postgres_names_on_one_dsn_and_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_DSN", "postgresql://acme_user:s3cret-one@localhost:5432/app")
    monkeypatch.setenv("GLOBEX_DSN", "host=127.0.0.1 port=5432 dbname=app user=globex password=s3cret-two")
    file = _write(tmp_path, [
        {"name": "acme_pg", "kind": "postgres", "dsn_env": "ACME_DSN", "schema": "shared"},
        {"name": "globex_pg", "kind": "postgres", "dsn_env": "GLOBEX_DSN", "schema": "shared"},
    ])
    problems = _problems(file)
    assert problems == [_same("pg", "acme_pg", "globex_pg", "postgresql://localhost:5432/app schema shared").replace(
        "a pg destination", "a postgres destination")]
    assert "s3cret" not in " ".join(problems)

    monkeypatch.setenv("GLOBEX_DSN", "postgresql://globex@localhost:5433/app")  # another server: allowed
    assert load_config(file).destination("globex_pg").schema_name == "shared"


def test_postgres_with_an_unset_variable_is_compared_by_name_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SHARED_DSN", raising=False)
    file = _write(tmp_path, [
        {"name": "acme_pg", "kind": "postgres", "dsn_env": "SHARED_DSN", "schema": "shared"},
        {"name": "globex_pg", "kind": "postgres", "dsn_env": "SHARED_DSN", "schema": "shared"},
    ])
    assert _problems(file) == [_same("pg", "acme_pg", "globex_pg", "$SHARED_DSN schema shared").replace(
        "a pg destination", "a postgres destination")]
    doc = yaml.safe_load(file.read_text())
    doc["destinations"][1]["schema"] = "globex"
    file.write_text(yaml.safe_dump(doc))
    assert run_command(["validate", "-c", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "note: $SHARED_DSN is not set, so its destinations were compared by variable name and schema only"
    )


def test_object_storage_may_share_a_prefix_but_never_nest(tmp_path: Path) -> None:
    file = _write(tmp_path, [
        {"name": "acme_files", "kind": "object_storage", "path": "./out/files"},
        {"name": "globex_files", "kind": "object_storage", "path": "./out/files/"},
    ])
    assert load_config(file).destination("globex_files").path == str(tmp_path.resolve() / "out" / "files")

    file = _write(tmp_path, [
        {"name": "acme_files", "kind": "object_storage", "path": "./out/files"},
        {"name": "globex_files", "kind": "object_storage", "path": "./out/files/globex"},
    ])
    inner = tmp_path.resolve() / "out" / "files"
    assert _problems(file) == [
        f'destinations[1]: "globex_files" (recipient globex) writes inside the location of "acme_files" (recipient acme): '
        f"{inner}/globex lies inside {inner}; an object_storage destination holds one recipient's copy, so give "
        '"globex_files" a location of its own'
    ]


def test_a_delta_table_inside_an_object_storage_prefix_is_refused(tmp_path: Path) -> None:
    file = _write(tmp_path, [
        {"name": "acme_files", "kind": "object_storage", "path": "./out"},
        {"name": "globex_delta", "kind": "delta", "path": "./out"},
    ])
    out = tmp_path.resolve() / "out"
    assert _problems(file) == [
        f'destinations[1]: "globex_delta" (recipient globex) writes to the same location as "acme_files" (recipient acme): '
        f"{out}; a delta destination holds one recipient's copy, so give \"globex_delta\" a location of its own"
    ]


def test_storage_urls_and_local_paths_are_normalised(tmp_path: Path) -> None:
    assert storage_url("s3a://Bucket/a//b/./c/") == "s3://bucket/a/b/c"
    assert storage_url("s3://bucket/a/x/../b") == "s3://bucket/a/b"
    assert storage_url("s3://bucket/") == "s3://bucket"
    assert storage_url("abfs://c@acct.dfs.core.windows.net/p/") == "abfss://c@acct.dfs.core.windows.net/p"
    assert resolved_path("file:///tmp/x/", tmp_path) == resolved_path("/tmp/x", tmp_path)
    assert resolved_path("rel/../x", tmp_path) == str(tmp_path.resolve() / "x")


def test_storage_url_destinations_are_compared_normalised(tmp_path: Path) -> None:
    file = _write(tmp_path, [
        {"name": "acme_delta", "kind": "delta", "path": "s3://lake/tenants/shared"},
        {"name": "globex_delta", "kind": "delta", "path": "s3a://LAKE/tenants//shared/"},
    ])
    assert _problems(file) == [_same("delta", "acme_delta", "globex_delta", "s3://lake/tenants/shared")]


def test_separate_locations_pass(tmp_path: Path) -> None:
    file = _write(tmp_path, [
        {"name": "acme_delta", "kind": "delta", "path": "./out/acme"},
        {"name": "globex_delta", "kind": "delta", "path": "./out/acme2"},
        {"name": "initech_files", "kind": "object_storage", "path": "./files"},
    ])
    assert [d.name for d in load_config(file).destinations] == ["acme_delta", "globex_delta", "initech_files"]


def test_two_duckdb_destinations_on_one_file_and_schema_are_refused(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "out").mkdir()
    file = _write(root, [
        {"name": "acme_duckdb", "kind": "duckdb", "path": "./out/copy.duckdb"},
        {"name": "globex_duckdb", "kind": "duckdb", "path": "./out/../out/copy.duckdb", "schema": "main"},
        {"name": "initech_duckdb", "kind": "duckdb", "path": "./out/copy.duckdb", "schema": "initech"},  # its own schema
    ])
    assert _problems(file) == [_same("duckdb", "acme", "globex", f"DuckDB file {root}/out/copy.duckdb schema main")]


def test_one_duckdb_destination_for_two_recipients_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(_write(tmp_path, [{"name": "d", "kind": "duckdb", "path": "./copy.duckdb"}] * 2).read_text())
    doc["destinations"] = doc["destinations"][:1]
    (tmp_path / "incsync.yaml").write_text(yaml.safe_dump(doc))
    assert _problems(tmp_path / "incsync.yaml") == [
        'destinations[0]: "d" is used by recipients acme, globex; a duckdb destination holds one recipient\'s copy, so give '
        "each recipient its own (object_storage may be shared)"]


def test_two_iceberg_destinations_on_one_catalog_namespace_are_refused(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "out").mkdir()
    file = _write(root, [
        {"name": "acme_iceberg", "kind": "iceberg", "path": "./out/wh"},
        {"name": "globex_iceberg", "kind": "iceberg", "path": "./out/../out/wh/", "namespace": "incsync"},
        {"name": "initech_iceberg", "kind": "iceberg", "path": "./out/wh", "namespace": "initech"},  # its own namespace
    ])
    assert _problems(file) == [_same("iceberg", "acme", "globex", f"Iceberg catalog {root}/out/wh namespace incsync")]


def test_one_iceberg_destination_for_two_recipients_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(_write(tmp_path, [{"name": "i", "kind": "iceberg", "path": "./wh"}] * 2).read_text())
    doc["destinations"] = doc["destinations"][:1]
    (tmp_path / "incsync.yaml").write_text(yaml.safe_dump(doc))
    assert _problems(tmp_path / "incsync.yaml") == [
        'destinations[0]: "i" is used by recipients acme, globex; an iceberg destination holds one recipient\'s copy, so give '
        "each recipient its own (object_storage may be shared)"]
