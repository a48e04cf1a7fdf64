"""Every storage URL against a real S3-compatible server (moto, started by the test session on a free port).

Delta and object-storage destinations, the reader and the janitor, a lake source and staging on ``s3://``;
the secret key always travels as an environment variable's name.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import incsync
from incsync.config.load import parse_config
from incsync.errors import ConfigError, LeaseError
from incsync.staging.batch import stage_arrow
from incsync.storage.files import open_store
from incsync.storage.filesystems import resolve_options
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target
from incsync_tests.support.lake import lake_config, order, ts, write_table
from incsync_tests.support.s3 import SECRET, SECRET_VAR

ROWS = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)), order(4, "org_1", ts(2, 6))]
ACME = [r for r in ROWS if r["organization_id"] == "org_1"]


def _configure(root: Path, destination: dict[str, Any], *, edit: Any = None) -> Path:
    write_table(root / "src", "orders", ROWS)
    path = lake_config(
        root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "dest"}],
        destinations=[{"name": "dest", **destination}], model={"lookback_seconds": 0},
    )
    if edit is not None:
        doc = yaml.safe_load(path.read_text())
        edit(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _keys(s3, url: str) -> list[str]:
    store = open_store(url, resolve_options(s3.options(), "test"))
    return sorted(store.relative(f.path) for f in store.list(recursive=True) if f.type.name == "File")


def test_storage_secrets_are_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"destinations": [{"name": "d", "kind": "delta", "path": "s3://b/p",
                             "storage_options": {"aws_region": "eu-west-1", "aws_secret_access_key": "hunter2"}}]}
    with pytest.raises(ConfigError) as raised:
        parse_config(doc)
    assert raised.value.problems == [
        "destinations[0].storage_options.aws_secret_access_key: a secret must not be written in the file; write "
        "`aws_secret_access_key_env: VARIABLE` and export VARIABLE"
    ]
    assert "hunter2" not in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        parse_config({"destinations": [{"name": "d", "kind": "object_storage", "path": "ftp://host/x"}], "staging_dir": "hdfs://nn/s"})
    assert raised.value.problems == [
        "destinations[0].path: scheme ftp:// is not supported; use a local path, file://, s3://, gs:// or abfss://",
        "staging_dir: scheme hdfs:// is not supported; use a local path, file://, s3://, gs:// or abfss://",
    ]
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ConfigError, match=r"d.storage_options.aws_secret_access_key_env: variable NOT_SET_ANYWHERE is not set"):
        resolve_options({"aws_secret_access_key_env": "NOT_SET_ANYWHERE"}, "d.storage_options")
    monkeypatch.setenv("MY_SECRET", "s3cr3t")
    assert resolve_options({"AWS_REGION": "x", "aws_secret_access_key_env": "MY_SECRET"}, "d") == {
        "aws_region": "x", "aws_secret_access_key": "s3cr3t"}


def test_object_storage_on_s3_manifests_reader_and_janitor(s3, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = s3.bucket()
    url = f"s3://{bucket}/shared/files"
    config = _configure(tmp_path, {"kind": "object_storage", "path": url, "storage_options": s3.options()})
    first = run(config, "2024-01-01", scheduled=False).record
    second = run(config, "2024-01-02", scheduled=False).record

    keys = _keys(s3, url)
    manifests = [k for k in keys if k.startswith("_manifests/orders/dt=")]
    assert manifests == sorted(f"_manifests/orders/dt={r.committed_at[:10]}/manifest_{r.transfer_id}.json" for r in (first, second))
    store = open_store(url, resolve_options(s3.options(), "test"))
    manifest = json.loads(store.read_text(f"_manifests/orders/dt={second.committed_at[:10]}/manifest_{second.transfer_id}.json"))
    assert (manifest["bucket_name"], manifest["bucket_prefix"]) == (bucket, "shared/files")
    assert (manifest["transfer_id"], manifest["rows_transferred"], manifest["high_watermark"]) == (
        second.transfer_id, 1, ts(2, 6).isoformat())
    [entry] = manifest["files"]
    assert entry["data_file_key"].startswith("orders/recipient=acme/dt=") and entry["data_file_key"] in keys
    assert entry["row_count"] == 1

    # The reader takes the URL and the same options as the config (the secret by its variable's name).
    rows = incsync.read_manifested(url, "orders", "acme", storage_options=s3.options())
    assert rows.sort_by("id").to_pylist() == ACME
    target = Target(config)
    assert target.high_watermark() == ts(2, 6)
    assert target.state().last_transfer.transfer_id == second.transfer_id

    # A writer that read the state before the last commit is refused and writes no manifest.
    stale = dataclasses.replace(target.state(), version="1")
    batch = stage_arrow(rows, tmp_path / "late")
    late = dataclasses.replace(second, transfer_id="20240101T000000Z-000000000000")
    with pytest.raises(LeaseError, match=rf"transfer {second.transfer_id} committed to s3://{bucket}/shared/files after"):
        target.destination.publish(model=target.model, recipient=target.recipient, batch=batch, record=late, expected=stale)
    assert [k for k in _keys(s3, url) if k.startswith("_manifests/orders/dt=")] == manifests
    # Manifests are write-once keys: an existing one is never replaced.
    with pytest.raises(FileExistsError):
        store.write_once(manifests[0], "{}")

    # The janitor removes only files no manifest lists, and says where, as URLs.
    orphan = "orders/recipient=acme/dt=2024-01-01/orphan.parquet"
    with store.fs.open_output_stream(store.path(orphan)) as f:
        pq.write_table(pa.table({"id": [99]}), f)
    assert incsync.janitor(url, grace_seconds=3600, storage_options=s3.options()) == []
    from incsync.cli.main import main

    assert main(["janitor", "-c", str(config), "--grace-seconds", "-60", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"would remove {url}/{orphan}",
                                                    "dest: would remove 1 unmanifested file(s) older than -60 s"]
    assert incsync.janitor(url, grace_seconds=-60, dry_run=True, storage_options=s3.options()) == [f"{url}/{orphan}"]
    assert store.exists(orphan)
    assert incsync.janitor(url, grace_seconds=-60, storage_options=s3.options()) == [f"{url}/{orphan}"]
    assert not store.exists(orphan)
    assert incsync.read_manifested(url, "orders", "acme", storage_options=s3.options()).sort_by("id").to_pylist() == ACME


def test_delta_destination_on_s3_merge_hw_and_a_concurrent_writer(s3, tmp_path: Path) -> None:
    bucket = s3.bucket()
    url = f"s3://{bucket}/delta/acme"
    config = _configure(tmp_path, {"kind": "delta", "path": url, "storage_options": s3.options()})
    run(config, "2024-01-01", scheduled=False)
    run(config, "2024-01-02", scheduled=False)
    target = Target(config)
    assert target.rows() == ACME
    assert target.high_watermark() == ts(2, 6)
    assert any(k.startswith("delta/acme/orders/_delta_log/") for k in _keys(s3, f"s3://{bucket}"))

    # MERGE: a changed row replaces its older version, a new row is inserted, other rows stay.
    changed = [*ROWS, order(5, "org_1", ts(2, 8))]
    changed[0] = order(1, "org_1", ts(2, 7), status="paid", amount=9.5)
    write_table(tmp_path / "src", "orders", changed)
    outcome = run(config, "2024-01-02", scheduled=False)
    assert (outcome.record.rows_transferred, outcome.record.delta_rows_transferred) == (3, 2)
    assert target.rows() == sorted([r for r in changed if r["organization_id"] == "org_1"], key=lambda r: r["id"])
    assert target.high_watermark() == ts(2, 8)

    # Two writers read the same state; the second to publish is refused and commits nothing.
    writer_a, writer_b = Target(config), Target(config)
    seen = writer_a.state()
    assert writer_b.state().version == seen.version
    batch = stage_arrow(pa.Table.from_pylist([order(6, "org_1", ts(2, 9))], schema=_orders_schema()), tmp_path / "a")
    record = dataclasses.replace(outcome.record, transfer_id="20240102T100000Z-aaaaaaaaaaaa")
    writer_a.destination.publish(model=writer_a.model, recipient=writer_a.recipient, batch=batch, record=record, expected=seen)
    version = target.state().version
    other = dataclasses.replace(record, transfer_id="20240102T100000Z-bbbbbbbbbbbb")
    with pytest.raises(LeaseError, match=rf"transfer {record.transfer_id} committed to {url}/orders after this transfer read"):
        writer_b.destination.publish(model=writer_b.model, recipient=writer_b.recipient, batch=batch, record=other, expected=seen)
    assert target.state().version == version
    assert target.state().last_transfer.transfer_id == record.transfer_id

    # Data files deleted behind the table's back are seen on S3 too: the next transfer re-syncs.
    from deltalake import DeltaTable

    options = resolve_options(s3.options(), "test")
    live = DeltaTable(f"{url}/orders", storage_options=options).file_uris()[0]
    open_store(f"{url}/orders", options).delete(live.removeprefix(f"{url}/orders/"))
    assert f"data file(s) of Delta table {url}/orders are missing" in target.state().reset_reason


def _orders_schema() -> pa.Schema:
    from incsync_tests.support.lake import ORDERS_SCHEMA

    return ORDERS_SCHEMA


def test_delta_rs_refuses_a_second_commit_of_one_version_on_s3(s3) -> None:
    """delta-rs commits with S3's conditional put (If-None-Match), which moto enforces: no lock service needed."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError

    options = resolve_options(s3.options(), "test")
    url = f"s3://{s3.bucket()}/t"
    write_deltalake(url, pa.table({"id": [1]}), storage_options=options)
    a, b = DeltaTable(url, storage_options=options), DeltaTable(url, storage_options=options)
    write_deltalake(a, pa.table({"id": [2]}), mode="append", commit_properties=CommitProperties(max_commit_retries=0))
    with pytest.raises(CommitFailedError):
        write_deltalake(b, pa.table({"id": [3]}), mode="append", commit_properties=CommitProperties(max_commit_retries=0))
    assert sorted(DeltaTable(url, storage_options=options).to_pyarrow_table()["id"].to_pylist()) == [1, 2]
    assert SECRET not in json.dumps(s3.options()) and s3.options()["aws_secret_access_key_env"] == SECRET_VAR


def _upload_table(s3, url: str, rows: list[dict[str, Any]]) -> None:
    from incsync_tests.support.lake import ORDERS_SCHEMA

    store = open_store(url, resolve_options(s3.options(), "test"))
    with store.fs.open_output_stream(store.path("part-0.parquet")) as f:
        pq.write_table(pa.Table.from_pylist(rows, schema=ORDERS_SCHEMA), f)


def test_lake_source_and_staging_on_s3(s3, tmp_path: Path, spark, dagster_instance) -> None:
    """A lake on S3 (read by pyarrow: Spark has no S3 connector here) into Delta, staged on S3 by Spark's tasks."""
    from incsync.orchestration.definitions import build_definitions
    from incsync_tests.support.lake import delta_rows, latest_metadata, materialize_partition

    bucket = s3.bucket()
    _upload_table(s3, f"s3://{bucket}/lake/orders", ROWS)

    def on_s3(doc: dict[str, Any]) -> None:
        doc["sources"][0].update(path=f"s3://{bucket}/lake", storage_options=s3.options())
        doc["staging_dir"] = f"s3://{bucket}/staging"
        doc["staging_storage_options"] = s3.options()

    config = _configure(tmp_path, {"kind": "delta", "path": "./out/acme"}, edit=on_s3)
    defs = build_definitions(config)
    for window in ("2024-01-01", "2024-01-02"):
        materialize_partition(defs, dagster_instance, window=window, recipient="acme")
    meta = latest_metadata(dagster_instance)
    assert (meta["rows_transferred"], meta["delta_rows_transferred"]) == (1, 1)
    assert meta["staged_bytes"] > 0  # the batch went through the S3 staging folder
    assert delta_rows(tmp_path / "out" / "acme" / "orders") == ACME
    assert Target(config).high_watermark() == ts(2, 6)
    assert _keys(s3, f"s3://{bucket}/staging") == []  # each transfer removed its staging folder

    # An empty read (the connectivity check, drift detection) goes the same way.
    from incsync.config.load import load_config
    from incsync.sources.registry import build_source

    cfg = load_config(config)
    build_source(cfg.source("lake")).check(spark, model=cfg.model("orders"), recipient=cfg.recipient("acme"))

    changed = [*ROWS, order(5, "org_1", ts(2, 8)), order(6, "org_2", ts(2, 9))]
    _upload_table(s3, f"s3://{bucket}/lake/orders", changed)
    materialize_partition(defs, dagster_instance, window="2024-01-02", recipient="acme")
    assert delta_rows(tmp_path / "out" / "acme" / "orders") == [*ACME, changed[4]]


def test_staging_on_s3_splits_a_fan_out_by_tenant(s3, spark) -> None:
    from incsync.staging.spark import stage, stage_by_tenant
    from incsync.storage.files import staging_root

    root = staging_root(f"s3://{s3.bucket()}/staging", s3.options())
    df = spark.createDataFrame(pa.Table.from_pylist(ROWS, schema=_orders_schema())).repartition(2)
    batch = stage(df, root / "one")
    assert (batch.rows, sorted(batch.table()["id"].to_pylist())) == (4, [1, 2, 3, 4])
    assert batch.table().schema.field("updated_at").type == pa.timestamp("us", tz="UTC")
    assert all(str(f).startswith(root.path) for f in batch.files)

    schema, batches = stage_by_tenant(df, root / "fan", "organization_id", ["org_1", "org_2"])
    assert sorted(batches) == ["org_1", "org_2"]
    assert sorted(batches["org_1"].table()["id"].to_pylist()) == [1, 2, 4]
    assert batches["org_2"].table().to_pylist() == [ROWS[2]]
    assert schema.names == ["id", "organization_id", "status", "amount", "updated_at"]


def test_validate_connect_lists_each_storage_url(s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.cli.connectivity import check_connectivity
    from incsync.config.load import load_config

    bucket = s3.bucket()

    def on_s3(doc: dict[str, Any]) -> None:
        doc["sources"][0].update(path=f"s3://{bucket}/lake", storage_options=s3.options())
        doc["staging_dir"] = "s3://no-such-bucket-here/staging"
        doc["staging_storage_options"] = s3.options()

    config = _configure(tmp_path, {"kind": "object_storage", "path": f"s3://{bucket}/files",
                                   "storage_options": {**s3.options(), "aws_secret_access_key_env": "INCSYNC_UNSET_VAR"}},
                        edit=on_s3)
    monkeypatch.delenv("INCSYNC_UNSET_VAR", raising=False)
    problems = check_connectivity(load_config(config))
    assert problems[0] == ("staging_dir: s3://no-such-bucket-here/staging: bucket no-such-bucket-here does not exist "
                           "(or staging_storage_options cannot see it); create it or fix the URL")
    assert problems[1:] == ["destinations[dest].storage_options.aws_secret_access_key_env: variable INCSYNC_UNSET_VAR is not set; "
                            "export it before running"]
    assert all(SECRET not in p for p in problems)


@pytest.mark.parametrize("form", ["path", "file_url"])
def test_local_paths_and_file_urls_are_one_store(tmp_path: Path, form: str) -> None:
    url = str(tmp_path / "d") if form == "path" else f"file://{tmp_path}/d"
    store = open_store(url)
    assert store.local and store.uri("a/b.json") == f"{tmp_path}/d/a/b.json"
    store.write_once("a/b.json", "1")
    with pytest.raises(FileExistsError):
        store.write_once("a/b.json", "2")
    store.write("a/b.json", "3")
    assert store.read_text("a/b.json") == "3"
    assert [p.name for p in (tmp_path / "d" / "a").iterdir()] == ["b.json"]  # no temporary file left


def test_object_storage_on_s3_from_staging_on_s3(s3, tmp_path: Path) -> None:
    """Staged files move from the staging bucket to the destination's by server-side copies; staging is emptied."""
    from incsync.storage.files import staging_root

    staging, files = f"s3://{s3.bucket()}/staging", f"s3://{s3.bucket()}/files"
    config = _configure(tmp_path, {"kind": "object_storage", "path": files, "storage_options": s3.options()})
    root = staging_root(staging, s3.options())
    for window in ("2024-01-01", "2024-01-02"):
        run(config, window, scheduled=False, staging_root=root)
    assert incsync.read_manifested(files, "orders", "acme", storage_options=s3.options()).sort_by("id").to_pylist() == ACME
    assert _keys(s3, staging) == []
    assert len([k for k in _keys(s3, files) if k.endswith(".parquet")]) == 2


@pytest.mark.parametrize(
    ("source", "model", "message"),
    [
        ({"format": "csv"}, {}, r"source lake: csv files on s3:// are read by Spark, which needs the Hadoop connector jars "
                                r"\(hadoop-aws, ...\) that this installation lacks; store the tables as Parquet"),
        ({}, {"source_table": None, "source_query": "SELECT * FROM orders"},
         r"source lake: a source_query over s3:// tables needs Spark to read them, which needs the Hadoop connector jars"),
    ],
    ids=["csv", "source_query"],
)
def test_what_a_lake_on_s3_needs_spark_for_is_refused_by_name(
    s3, tmp_path: Path, source: dict[str, Any], model: dict[str, Any], message: str
) -> None:
    from incsync.config.load import load_config
    from incsync.core.bounds import EPOCH, Bounds
    from incsync.errors import SourceError
    from incsync.sources.registry import build_source

    def on_s3(doc: dict[str, Any]) -> None:
        doc["sources"][0].update(path=f"s3://{s3.bucket()}/lake", storage_options=s3.options(), **source)
        doc["models"][0].update(model)
        doc["models"][0] = {k: v for k, v in doc["models"][0].items() if v is not None}

    cfg = load_config(_configure(tmp_path, {"kind": "delta", "path": "./out/acme"}, edit=on_s3))
    bounds = Bounds(lower=EPOCH, upper=EPOCH, lookback_seconds=0, reason="test")
    with pytest.raises(SourceError, match=message):
        build_source(cfg.source("lake")).read(None, model=cfg.model("orders"), recipient=cfg.recipient("acme"), bounds=bounds)


def test_file_urls_for_lake_staging_and_destinations(tmp_path: Path, spark, dagster_instance) -> None:
    from incsync.cli.connectivity import check_connectivity
    from incsync.config.load import load_config
    from incsync.orchestration.definitions import build_definitions
    from incsync_tests.support.lake import delta_rows, materialize_partition

    def file_urls(doc: dict[str, Any]) -> None:
        doc["sources"][0]["path"] = f"file://{tmp_path}/src"
        doc["staging_dir"] = f"file://{tmp_path}/staging-by-url"

    config = _configure(tmp_path, {"kind": "delta", "path": f"file://{tmp_path}/out/acme"}, edit=file_urls)
    (tmp_path / "out").mkdir()
    assert check_connectivity(load_config(config)) == []
    materialize_partition(build_definitions(config), dagster_instance, window="2024-01-01", recipient="acme")
    assert delta_rows(tmp_path / "out" / "acme" / "orders") == ACME[:2]
    assert list((tmp_path / "staging-by-url").iterdir()) == []


@pytest.mark.slow  # ~35 s with the server's start: make test-long (S3 alone and Connect alone stay in make test)
def test_everything_on_s3_through_a_spark_connect_server(s3, connect_port: int, tmp_path: Path) -> None:
    """Lake, staging and an object-storage destination on S3, with Spark kept warm in a Connect server:
    the server's tasks stage to S3 through pyarrow, as local executors do."""
    import os

    from incsync_tests.spark.test_spark_connect import _cli

    bucket = s3.bucket()
    _upload_table(s3, f"s3://{bucket}/lake/orders", ROWS)
    files = f"s3://{bucket}/files"

    def on_s3(doc: dict[str, Any]) -> None:
        doc["sources"][0].update(path=f"s3://{bucket}/lake", storage_options=s3.options())
        doc["staging_dir"] = f"s3://{bucket}/staging"
        doc["staging_storage_options"] = s3.options()
        doc["spark"] = {"spark.remote": f"sc://127.0.0.1:{connect_port}"}

    config = _configure(tmp_path, {"kind": "object_storage", "path": files, "storage_options": s3.options()}, edit=on_s3)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    out, _ = _cli("transfer", "orders", "--recipient", "acme", "--window", "2024-01-01", "-c", str(config), env=env)
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr
    assert incsync.read_manifested(files, "orders", "acme", storage_options=s3.options()).sort_by("id").to_pylist() == ACME[:2]
    assert _keys(s3, f"s3://{bucket}/staging") == []
