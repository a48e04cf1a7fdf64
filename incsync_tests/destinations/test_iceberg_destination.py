"""Iceberg destination, what is its own beyond the conformance suite: one snapshot per publish carrying the
record, a full refresh that keeps the table's UUID and history, a PostgreSQL catalog, stale writers,
the widenings Iceberg cannot apply in place, values it cannot hold, and maintenance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from incsync.errors import LeaseError, SchemaError
from incsync.staging.batch import stage_arrow
from incsync_tests.destinations.conformance.test_schema import BASE, _row, _set
from incsync_tests.support.arrow_transfer import run
from incsync_tests.support.destinations import Target, destination_spec, postgres_database
from incsync_tests.support.lake import ORDERS_SCHEMA, lake_config, order, ts, write_table

SOURCE = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)), order(4, "org_1", ts(2, 10))]


def _configure(root: Path, rows: list[dict], schema: pa.Schema = ORDERS_SCHEMA, **spec: str) -> Path:
    write_table(root / "src", "orders", rows, schema=schema)
    return lake_config(root, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                       destinations=[{**destination_spec("iceberg"), **spec}], model={"columns": None, "lookback_seconds": 0})


def _snapshots(target: Target) -> list:
    table = target.destination.table(target.model)
    return sorted(table.snapshots(), key=lambda s: s.sequence_number)


def test_each_publish_is_one_snapshot_with_its_record_and_a_full_refresh_keeps_identity(tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    target = Target(config)
    first = run(config, "2024-01-01", scheduled=False)
    again = run(config, "2024-01-01", scheduled=False)  # unchanged rows: an APPEND snapshot with no files
    table = target.destination.table(target.model)
    uuid = table.metadata.table_uuid
    snaps = _snapshots(target)
    assert [s.summary.operation.value for s in snaps] == ["append", "append"]
    assert [s.summary["incsync.transfer"] for s in snaps] == [first.record.to_json(), again.record.to_json()]
    assert snaps[1].summary.get("added-data-files") is None  # nothing rewritten
    assert again.destination_metadata["iceberg_rows_written"] == 0

    write_table(tmp_path / "src", "orders", [r for r in SOURCE if r["id"] != 2])
    refresh = run(config, "2024-01-02", scheduled=False, full_refresh=True)
    snaps = _snapshots(target)
    assert len(snaps) == 3 and snaps[-1].summary.operation.value == "overwrite"
    assert snaps[-1].summary["incsync.transfer"] == refresh.record.to_json()
    assert target.destination.table(target.model).metadata.table_uuid == uuid
    assert sorted(r["id"] for r in target.rows()) == [1, 4]
    assert refresh.destination_metadata["iceberg_rows_replaced"] == 2
    old = target.destination.table(target.model).scan(snapshot_id=snaps[0].snapshot_id).to_arrow()
    assert sorted(old["id"].to_pylist()) == [1, 2]  # time travel to the first transfer still reads it


def test_a_postgresql_catalog_holds_the_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with postgres_database() as dsn:
        monkeypatch.setenv("ICEBERG_CATALOG", dsn)
        config = _configure(tmp_path, SOURCE, catalog_uri_env="ICEBERG_CATALOG")
        outcome = run(config, "2024-01-01", scheduled=False)
        target = Target(config)
        assert [r["id"] for r in target.rows()] == [1, 2]
        assert target.state().last_transfer == outcome.record
        assert not (tmp_path / "out" / "acme" / "catalog.db").exists()
        import psycopg

        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT catalog_name, table_namespace, table_name FROM iceberg_tables").fetchall()
        assert rows == [("incsync", "incsync", "orders")]


def test_a_stale_writer_is_refused(tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE)
    target = Target(config)
    first = run(config, "2024-01-01", scheduled=False)
    stale = target.state()
    run(config, "2024-01-02", scheduled=False)
    batch = stage_arrow(pa.Table.from_pylist([SOURCE[0]], schema=ORDERS_SCHEMA), tmp_path / "stage")
    with pytest.raises(LeaseError, match="committed to incsync.orders after this transfer read"):
        target.destination.publish(model=target.model, recipient=target.recipient, batch=batch,
                                   record=replace(first.record, transfer_id="stale"), expected=stale)
    assert target.state().last_transfer.transfer_id != "stale"


def test_a_widening_iceberg_cannot_promote_waits_for_a_full_refresh(tmp_path: Path) -> None:
    config = _configure(tmp_path, [_row(1, 1, qty=7)], schema=BASE)
    run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    write_table(tmp_path / "src", "orders", [_row(1, 2, qty=7), _row(2, 3, qty=8)], schema=_set(BASE, "qty", pa.float64()))
    with pytest.raises(SchemaError) as caught:
        run(config, "2024-01-01", scheduled=True)
    assert str(caught.value) == (
        "model orders, recipient acme: Iceberg table incsync.orders cannot widen in place: column qty integer→double "
        "(Iceberg promotes only int→long, float→double and a decimal's precision at the same scale). Nothing was "
        "committed; run a full refresh (incsync transfer orders --recipient acme --full-refresh) to rewrite the table "
        "with the new types."
    )
    assert [(r["id"], r["qty"]) for r in target.rows()] == [(1, 7)]
    run(config, "2024-01-01", scheduled=False, full_refresh=True)
    assert [(r["id"], r["qty"]) for r in target.rows()] == [(1, 7.0), (2, 8.0)]
    assert str(target.destination.table(target.model).schema().find_field("qty").field_type) == "double"


def test_a_value_iceberg_cannot_hold_fails_naming_the_column(tmp_path: Path) -> None:
    schema = ORDERS_SCHEMA.append(pa.field("tm_ns", pa.time64("ns")))
    rows = pa.Table.from_pylist([SOURCE[0]], schema=ORDERS_SCHEMA).append_column(
        schema.field("tm_ns"), pa.array([3_600_000_000_001], pa.time64("ns")))  # 01:00:00.000000001
    (tmp_path / "src" / "orders").mkdir(parents=True)
    import pyarrow.parquet as pq

    pq.write_table(rows, tmp_path / "src" / "orders" / "part-0.parquet")
    config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                         destinations=[destination_spec("iceberg")], model={"columns": None, "lookback_seconds": 0})
    with pytest.raises(SchemaError, match=r"^model orders, recipient acme: column tm_ns holds time64\[ns\] values that "
                                          r"Iceberg's time64\[us\] cannot store exactly \(.*\); docs/types.md lists"):
        run(config, "2024-01-01", scheduled=False)
    target = Target(config)
    assert target.destination.table(target.model) is None


def _stored_files(target: Target) -> set[str]:
    """The data and manifest files in the table's folder (relative paths)."""
    folder = Path(target.destination.table(target.model).location().removeprefix("file://"))
    return {str(f.relative_to(folder)) for f in folder.rglob("*") if f.suffix in (".parquet", ".avro")}


def _read_by_current(target: Target) -> set[str]:
    table = target.destination.table(target.model)
    folder = table.location().removeprefix("file://") + "/"
    snapshot = table.current_snapshot()
    paths = {snapshot.manifest_list}
    for manifest in snapshot.manifests(table.io):
        paths.add(manifest.manifest_path)
        paths.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return {p.removeprefix("file://").removeprefix(folder) for p in paths}


@pytest.mark.parametrize("retention_hours", [0, 168])
def test_maintain_compacts_expires_vacuums_past_the_retention_and_keeps_the_record(retention_hours: int, tmp_path: Path) -> None:
    config = _configure(tmp_path, SOURCE, retention_hours=str(retention_hours))
    target = Target(config)
    run(config, "2024-01-01", scheduled=False)
    write_table(tmp_path / "src", "orders", [*SOURCE, order(5, "org_1", ts(1, 5))])
    last = run(config, "2024-01-01", scheduled=False)
    data = next(f for f in _stored_files(target) if f.endswith(".parquet"))
    folder = Path(target.destination.table(target.model).location().removeprefix("file://"))
    (folder / "data" / "left-by-a-killed-publish.parquet").write_bytes((folder / data).read_bytes())
    before = _stored_files(target)

    (dry,) = target.destination.maintain([target.model], compact=True, dry_run=True)
    assert _stored_files(target) == before and dry.dry_run  # a dry run deletes nothing
    (done,) = target.destination.maintain([target.model], compact=True, dry_run=False)
    assert (done.files_before, done.files_after, done.files_compacted) == (2, 1, 2)
    assert target.state().last_transfer == last.record
    assert sorted(r["id"] for r in target.rows()) == [1, 2, 5]
    if retention_hours == 0:  # every snapshot but the current one expired; what only they read is gone, the orphan too
        assert len(_snapshots(target)) == 1
        assert _stored_files(target) == _read_by_current(target)
        assert dry.files_vacuumed == 1  # while every snapshot remains, only the orphan is read by none
        gone = before - _stored_files(target)
        assert "data/left-by-a-killed-publish.parquet" in gone and done.files_vacuumed >= len(gone) > 1
    else:  # inside the retention every file stays: a reader of an older snapshot still finds its files
        assert len(_snapshots(target)) > 1 and (dry.files_vacuumed, done.files_vacuumed) == (0, 0)
        assert before < _stored_files(target)


def test_a_warehouse_on_s3(s3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3.bucket()
    monkeypatch.setenv("ICEBERG_CATALOG", f"sqlite:///{tmp_path / 'catalog.db'}")
    config = _configure(tmp_path, SOURCE, path=f"s3://{bucket}/wh", catalog_uri_env="ICEBERG_CATALOG",
                        storage_options=s3.options(), retention_hours="0")
    target = Target(config)
    run(config, "2024-01-01", scheduled=False)
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(2, 1), status="paid"), *SOURCE[1:]])
    last = run(config, "2024-01-02", scheduled=False)
    assert [(r["id"], r["status"]) for r in target.rows()] == [(1, "paid"), (2, "new"), (4, "new")]
    assert target.state().last_transfer == last.record
    assert target.destination.table(target.model).location() == f"s3://{bucket}/wh/incsync/orders"

    # Maintenance past the retention on S3: what only expired snapshots read is deleted, the copy stays exact.
    from incsync.storage.files import open_store
    from incsync.storage.filesystems import resolve_options

    store = open_store(f"s3://{bucket}/wh/incsync/orders", resolve_options(s3.options(), "test"))
    stored = lambda: {store.relative(i.path) for i in store.list(recursive=True) if i.path.endswith((".parquet", ".avro"))}  # noqa: E731
    before = stored()
    (done,) = target.destination.maintain([target.model], compact=True, dry_run=False)
    assert len(_snapshots(target)) == 1 and done.files_vacuumed >= len(before - stored()) > 0
    table = target.destination.table(target.model)
    snapshot = table.current_snapshot()  # what is left is exactly what the one remaining snapshot reads
    read = {snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))}
    read |= {e.data_file.file_path for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io)}
    assert stored() == {store.relative(p.removeprefix("s3://")) for p in read}
    assert [(r["id"], r["status"]) for r in target.rows()] == [(1, "paid"), (2, "new"), (4, "new")]
    assert target.state().last_transfer == last.record


@pytest.mark.parametrize("again", [False, True], ids=["new-keys-appended", "key-read-twice-merged"])
def test_a_split_first_backfill(again: bool, spark, tmp_path: Path, dagster_instance) -> None:
    """A first backfill in three commits: appends when its keys are new, the tie-break when one is read twice."""
    from incsync_tests.transfer.test_transfer_plans import run_range

    rows = [order(i, "org_1", ts(day, i)) for i, day in enumerate([1, 1, 2, 3, 5, 5], start=1)]
    if again:
        rows.append(order(1, "org_1", ts(5, 9), status="paid"))
    write_table(tmp_path / "src", "orders", rows)
    config = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_dest"}],
                         destinations=[destination_spec("iceberg")], model={"max_rows_per_batch": 2})
    assert run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-05", "acme")).success
    target = Target(config)
    snaps = _snapshots(target)
    assert len(snaps) == 3 and all("incsync.transfer" in s.summary.additional_properties for s in snaps)
    # Read twice: the last commit rewrites the file holding key 1 (the others' keys lie outside every file's range).
    assert [s.summary.operation.value for s in snaps] == (["append", "append", "overwrite"] if again else ["append"] * 3)
    got = {r["id"]: (r["status"], r["updated_at"]) for r in target.rows()}
    assert got == {1: ("paid", ts(5, 9)) if again else ("new", ts(1, 1)), 2: ("new", ts(1, 2)), 3: ("new", ts(2, 3)),
                   4: ("new", ts(3, 4)), 5: ("new", ts(5, 5)), 6: ("new", ts(5, 6))}


def test_a_rest_catalog_is_configuration_and_an_unreachable_one_fails_by_name(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.config.destinations import IcebergDestinationConfig
    from incsync.destinations.iceberg.destination import IcebergDestination
    from incsync.errors import ConfigError, PublishError

    config = IcebergDestinationConfig(name="lake", kind="iceberg", path=str(tmp_path / "wh"), catalog="rest")
    with pytest.raises(ConfigError) as missing:
        IcebergDestination(config).check()
    assert missing.value.problems == ["lake.catalog_uri_env: a REST catalog needs the variable holding its URL (https://...)"]
    monkeypatch.setenv("REST_CATALOG", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(PublishError, match=r"^destination lake: cannot open the Iceberg rest catalog of .*/wh: "):
        IcebergDestination(config.model_copy(update={"catalog_uri_env": "REST_CATALOG"})).check()


def test_an_unreachable_postgresql_catalog_fails_without_its_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from incsync.config.destinations import IcebergDestinationConfig
    from incsync.destinations.iceberg.destination import IcebergDestination
    from incsync.errors import PublishError

    monkeypatch.setenv("PG_CATALOG", "postgresql://incsync:s3cr3t-pw@127.0.0.1:9/catalog")
    config = IcebergDestinationConfig(name="lake", kind="iceberg", path=str(tmp_path / "wh"), catalog_uri_env="PG_CATALOG")
    with pytest.raises(PublishError) as caught:
        IcebergDestination(config).check()
    assert str(caught.value).startswith(f"destination lake: cannot open the Iceberg sql catalog of {tmp_path / 'wh'}: ")
    assert "s3cr3t-pw" not in str(caught.value) and caught.value.__cause__ is None
