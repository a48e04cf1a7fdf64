"""Transfer plans through real Dagster runs: coalesced windows, batches by size, fan-out reads, no-change runs."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from deltalake import DeltaTable

from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.orchestration.definitions import build_definitions
from incsync.sources.lake import LakeSource
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

MODEL = dg.AssetKey(["lake", "orders"])
THREE = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_delta"},
]


def run_range(config: Path, instance: dg.DagsterInstance, first: tuple[str, str], last: tuple[str, str], tags=None):
    """Materialize the box of partitions from ``first`` to ``last`` ((window, recipient) each) in one run."""
    recipients = sorted({first[1], last[1]})
    missing = [r for r in recipients if not instance.has_dynamic_partition(RECIPIENTS_PARTITIONS, r)]
    if missing:
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, missing)
    job = build_definitions(config).resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance, asset_selection=[MODEL], raise_on_error=False,
        tags={ASSET_PARTITION_RANGE_START_TAG: str(partition_key(*first)), ASSET_PARTITION_RANGE_END_TAG: str(partition_key(*last)),
              **(tags or {})},
    )


def metadata_by_partition(instance: dg.DagsterInstance) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for record in reversed(instance.fetch_materializations(MODEL, limit=10_000).records):
        mat = record.asset_materialization
        out[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return out


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every source read (the reads still run): 'one' per single-recipient read, 'many' per fan-out read."""
    calls: list[str] = []
    one, many = LakeSource.read, LakeSource.read_many

    def read(self, *args, **kwargs):
        calls.append("one")
        return one(self, *args, **kwargs)

    def read_many(self, *args, **kwargs):
        calls.append(f"many:{len(kwargs['targets'])}")
        return many(self, *args, **kwargs)

    monkeypatch.setattr(LakeSource, "read", read)
    monkeypatch.setattr(LakeSource, "read_many", read_many)
    return calls


def test_a_backfill_over_many_windows_is_one_read_and_one_commit_with_exact_window_metadata(
    spark, tmp_path: Path, dagster_instance, reads: list[str]
) -> None:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 10)),
        order(2, "org_1", ts(1, 23, 58)),  # in the lookback (300 s) below Jan 2: counted in Jan 2's window
        order(3, "org_1", ts(2)),
        order(4, "org_1", ts(2, 12, 0, 0, 250_000)),
        order(5, "org_1", ts(4, 1)),  # Jan 3 holds no row
        order(6, "org_1", ts(5, 23, 59, 59, 999_999)),
        order(7, "org_2", ts(2, 5)),  # another tenant: never read for acme
        order(8, "org_1", ts(6, 1)),  # after the last window
    ])
    config = lake_config(tmp_path)
    assert run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-01", "acme")).success
    table = tmp_path / "out" / "acme" / "orders"
    version = DeltaTable(str(table)).version()
    reads.clear()

    result = run_range(config, dagster_instance, ("2024-01-02", "acme"), ("2024-01-05", "acme"))

    assert result.success
    assert reads == ["one"]
    assert DeltaTable(str(table)).version() == version + 1  # one commit for four windows
    assert [r["id"] for r in delta_rows(table)] == [1, 2, 3, 4, 5, 6]
    md = metadata_by_partition(dagster_instance)
    windows = ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
    got = {w: md[f"acme|{w}"] for w in windows}
    assert [(m["rows_transferred"], m["delta_rows_transferred"]) for m in got.values()] == [(3, 2), (0, 0), (1, 1), (1, 1)]
    assert len({m["transfer_id"] for m in got.values()}) == 1
    # What the commit's windows share is its last window's alone (docs/design.md#bookkeeping) ...
    record = got["2024-01-05"]
    assert record["window_start"] == ts(5).timestamp() and record["window_end"] == ts(6).timestamp()
    assert record["lower_bound"] == ts(1, 23, 55).timestamp() and record["upper_bound"] == ts(6).timestamp()
    assert record["high_watermark"] == ts(5, 23, 59, 59, 999_999).timestamp()
    assert record["transfer_windows"] == 4
    assert [c.name for c in record["dagster/column_schema"].columns][:2] == ["id", "organization_id"]
    assert {"recipient", "dagster/row_count", "delta_table_version", "destination_owner", "transfer_type",
            "destination", "staged_bytes", "duration_seconds", "lookback_seconds"} <= set(record)
    assert "transfer_batch" not in record and "transfer_record" not in record
    # ... the others carry their own counts, the transfer's id and a link to the record's partition page.
    page = "/assets/lake/orders?view=partitions&partition=acme%7C2024-01-05"
    assert got["2024-01-03"] == {"rows_transferred": 0, "delta_rows_transferred": 0,
                                 "transfer_id": record["transfer_id"], "transfer_record": page}
    assert got["2024-01-02"] == {"rows_transferred": 3, "delta_rows_transferred": 2, "dagster/row_count": 3,
                                 "transfer_id": record["transfer_id"], "transfer_record": page}


def test_commits_hold_at_most_250000_rows_by_default(tmp_path: Path) -> None:
    """The default commit size (docs/operations.md, Sizing memory: what a transfer holds follows it)."""
    from incsync.config.load import load_config

    model = load_config(lake_config(tmp_path)).models[0]
    assert model.max_rows_per_batch == 250_000


def test_a_transfer_larger_than_max_rows_per_batch_commits_whole_windows_in_order(
    spark, tmp_path: Path, dagster_instance
) -> None:
    rows = [order(i, "org_1", ts(day, i)) for i, day in enumerate([1, 1, 2, 3, 5, 5], start=1)]
    write_table(tmp_path / "src", "orders", rows)
    config = lake_config(tmp_path, model={"max_rows_per_batch": 2})

    result = run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-05", "acme"))

    assert result.success
    table = DeltaTable(str(tmp_path / "out" / "acme" / "orders"))
    assert table.version() == 3  # the owner stamp (version 0), then three commits: Jan 1 | Jan 2-4 | Jan 5
    md = metadata_by_partition(dagster_instance)
    # Each commit's record is its last window: an earlier window of the commit links to it.
    got = [(md[f"acme|2024-01-0{d}"]["transfer_batch"], md[f"acme|2024-01-0{d}"]["rows_transferred"],
            md[f"acme|2024-01-0{d}"].get("high_watermark"), md[f"acme|2024-01-0{d}"].get("transfer_record")) for d in range(1, 6)]
    page = "/assets/lake/orders?view=partitions&partition=acme%7C2024-01-0{}".format
    assert got == [
        ("1/3", 2, ts(1, 2).timestamp(), None),
        ("2/3", 1, None, page(4)),
        ("2/3", 1, None, page(4)),
        ("2/3", 0, ts(3, 4).timestamp(), None),
        ("3/3", 2, ts(5, 6).timestamp(), None),
    ]
    records = [c.get("incsync.transfer") for c in table.history() if c.get("incsync.transfer")]
    assert len(records) == 3
    # A first backfill's keys are new to the table: every commit appends, none joins the table in a MERGE.
    assert [c["operation"] for c in reversed(table.history()) if c.get("incsync.transfer")] == ["WRITE"] * 3
    assert sorted(r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")) == [1, 2, 3, 4, 5, 6]


def test_a_key_read_twice_in_a_split_backfill_is_merged_newest_wins(spark, tmp_path: Path, dagster_instance) -> None:
    rows = [order(i, "org_1", ts(day, i)) for i, day in enumerate([1, 1, 2, 3, 5, 5], start=1)]
    rows.append(order(1, "org_1", ts(5, 9), status="paid"))  # key 1 again, newer, in the last commit
    write_table(tmp_path / "src", "orders", rows)
    config = lake_config(tmp_path, model={"max_rows_per_batch": 2})

    assert run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-05", "acme")).success

    table = DeltaTable(str(tmp_path / "out" / "acme" / "orders"))
    assert [c["operation"] for c in reversed(table.history()) if c.get("incsync.transfer")] == ["WRITE", "MERGE", "MERGE"]
    got = {r["id"]: (r["status"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "acme" / "orders")}
    assert got == {1: ("paid", ts(5, 9)), 2: ("new", ts(1, 2)), 3: ("new", ts(2, 3)), 4: ("new", ts(3, 4)),
                   5: ("new", ts(5, 5)), 6: ("new", ts(5, 6))}


def test_recipients_of_one_run_are_read_together_and_one_bad_recipient_fails_alone(
    spark, tmp_path: Path, dagster_instance, reads: list[str]
) -> None:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(2, 1)),
        order(3, "org_2", ts(1, 2)), order(3, "org_2", ts(2, 2)),  # globex: a duplicate key
        order(4, "org_3", ts(2, 3)),
        order(5, "org_9", ts(1, 4)),  # nobody's tenant
    ])
    config = lake_config(tmp_path, recipients=THREE)
    dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex", "initech"])

    result = run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-02", "initech"))

    assert not result.success
    assert reads == ["many:3"]
    assert dagster_instance.get_materialized_partitions(MODEL) == {
        "acme|2024-01-01", "acme|2024-01-02", "initech|2024-01-01", "initech|2024-01-02"
    }
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [4]
    assert not (tmp_path / "out" / "globex" / "orders").exists()
    md = metadata_by_partition(dagster_instance)
    assert [md[f"acme|2024-01-0{d}"]["rows_transferred"] for d in (1, 2)] == [1, 1]
    assert [md[f"initech|2024-01-0{d}"]["rows_transferred"] for d in (1, 2)] == [0, 1]
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.cause.message
    assert "globex" in message and "primary key" in message and "acme" not in message

    # The retry of globex alone resumes it, once its source is fixed.
    write_table(tmp_path / "src", "orders", [order(3, "org_2", ts(2, 2))])
    assert run_range(config, dagster_instance, ("2024-01-01", "globex"), ("2024-01-02", "globex")).success
    assert [(r["id"], r["updated_at"]) for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == [(3, ts(2, 2))]


def test_a_failed_transfer_fails_its_run_with_a_failure_naming_model_recipient_and_windows(
    spark, tmp_path: Path, dagster_instance
) -> None:
    from incsync.config.tags import ERROR_TAG
    from incsync.operations.runs import failure_message

    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(2, 1)), order(2, "org_1", ts(2, 2))])
    config = lake_config(tmp_path)

    result = run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-02", "acme"))

    assert not result.success
    reason = (
        "model orders, recipient acme: 1 primary key value(s) (id) occur more than once in the batch: (1); "
        "nothing was published. Fix the source or choose a primary_key that is unique."
    )
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data
    assert failure.error.cls_name == "Failure"  # raised as is, not "Error occurred while handling output"
    assert failure.error.cause.cls_name == "ValidationError"
    blamed = ("source rows break the model's contract (NULL or duplicate primary key, NULL last-modified): fix the "
              "rows at the source or the model's primary_key")
    assert failure.user_failure_data.description == (
        "model orders, recipient acme, windows 2024-01-01 .. 2024-01-02 (2) not committed: ValidationError: "
        + reason.removeprefix("model orders, recipient acme: ") + f"\n    blamed provider: {blamed}"
    )
    assert {k: v.value for k, v in failure.user_failure_data.metadata.items()} == {
        "model": "orders", "recipient": "acme", "windows": {"acme": ["2024-01-01", "2024-01-02"]},
        "error": f"ValidationError: {reason}", "blamed": "provider", "blame_reason": blamed,
        "blamed_by_recipient": {"acme": {"party": "provider", "reason": blamed}},
    }
    # The command line and `incsync transfers` still name the incsync error itself.
    assert failure_message(dagster_instance, result.run_id) == f"ValidationError: {reason}"
    assert dagster_instance.get_run_by_id(result.run_id).tags[ERROR_TAG] == f"ValidationError: {reason}"
    assert dagster_instance.get_materialized_partitions(MODEL) == set()


def test_a_run_where_several_recipients_fail_names_each_with_its_windows(spark, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(1, 1)),
        order(3, "org_2", ts(1, 2)), order(3, "org_2", ts(2, 2)),
        order(4, "org_3", ts(2, 3)), order(4, "org_3", ts(2, 4)),
    ])
    config = lake_config(tmp_path, recipients=THREE)
    dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, ["acme", "globex", "initech"])

    result = run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-02", "initech"))

    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
    duplicate = "1 primary key value(s) (id) occur more than once in the batch: ({}); nothing was published. " \
                "Fix the source or choose a primary_key that is unique."
    blamed = ("blamed provider: source rows break the model's contract (NULL or duplicate primary key, NULL "
              "last-modified): fix the rows at the source or the model's primary_key")
    assert failure.description == (
        "model orders: 2 recipient(s) failed:\n"
        f"  model orders, recipient globex, windows 2024-01-01 .. 2024-01-02 (2) not committed: ValidationError: {duplicate.format(3)}\n"
        f"    {blamed}\n"
        f"  model orders, recipient initech, windows 2024-01-01 .. 2024-01-02 (2) not committed: ValidationError: {duplicate.format(4)}\n"
        f"    {blamed}"
    )
    metadata = {k: v.value for k, v in failure.metadata.items()}
    assert (metadata["recipient"], metadata["windows"]) == (
        "globex, initech", {"globex": ["2024-01-01", "2024-01-02"], "initech": ["2024-01-01", "2024-01-02"]}
    )
    assert metadata["error"] == (
        f"globex: ValidationError: model orders, recipient globex: {duplicate.format(3)}\n"
        f"initech: ValidationError: model orders, recipient initech: {duplicate.format(4)}"
    )
    assert dagster_instance.get_materialized_partitions(MODEL) == {"acme|2024-01-01", "acme|2024-01-02"}


def test_a_run_with_no_changed_rows_rewrites_no_delta_file(spark, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", [order(i, "org_1", ts(2, i)) for i in range(1, 6)])
    config = lake_config(tmp_path)
    assert run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-02", "acme")).success
    table = tmp_path / "out" / "acme" / "orders"
    files = sorted(DeltaTable(str(table)).file_uris())

    again = run_range(config, dagster_instance, ("2024-01-02", "acme"), ("2024-01-02", "acme"))

    assert again.success
    dt = DeltaTable(str(table))
    assert sorted(dt.file_uris()) == files
    assert dt.history(1)[0]["operation"] != "MERGE"  # the transfer is recorded in a commit with no data
    md = metadata_by_partition(dagster_instance)["acme|2024-01-02"]
    assert (md["rows_transferred"], md["delta_rows_transferred"]) == (5, 0)


def test_a_full_refresh_over_many_windows_is_one_transfer_published_once(spark, tmp_path: Path, dagster_instance) -> None:
    """Each window used to publish its own full refresh, leaving only the last one."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(2, 1)), order(3, "org_1", ts(3, 1))])
    config = lake_config(tmp_path)
    assert run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-03", "acme")).success
    table = tmp_path / "out" / "acme" / "orders"
    version = DeltaTable(str(table)).version()
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1), status="fixed"), order(3, "org_1", ts(3, 1)),
                                             order(4, "org_1", ts(4, 1))])

    result = run_range(config, dagster_instance, ("2024-01-02", "acme"), ("2024-01-03", "acme"),
                       tags={"incsync/full_refresh": "true"})

    assert result.success
    dt = DeltaTable(str(table))
    assert dt.version() == version + 1 and dt.history(1)[0]["operation"] == "WRITE"  # one overwrite commit
    # Everything from the recipient's start to now (row 2 was deleted at the source; row 4 lies after the run's windows).
    assert [(r["id"], r["status"]) for r in delta_rows(table)] == [(1, "fixed"), (3, "new"), (4, "new")]
    # Every window of the recipient's span is marked delivered, not only the run's two
    # (docs/design.md#the-partition-view): from the model's start to the window open now, each with its rows.
    today = datetime.now(UTC).date()
    days = [(date(2024, 1, 1) + timedelta(days=d)).isoformat() for d in range((today - date(2024, 1, 1)).days + 1)]
    assert dagster_instance.get_materialized_partitions(MODEL) == {f"acme|{d}" for d in days}
    md = metadata_by_partition(dagster_instance)
    assert [md[f"acme|{d}"]["rows_transferred"] for d in days] == [1, 0, 1, 1] + [0] * (len(days) - 4)
    assert len({md[f"acme|{d}"]["transfer_id"] for d in days}) == 1
    record = md[f"acme|{days[-1]}"]  # the one commit's record: its last window
    assert (record["transfer_type"], record["full_refresh_reason"], record["transfer_windows"]) == (
        "FULL_REFRESH", "requested", len(days))
    assert (record["lower_bound"], record["rows_transferred"]) == (ts(1).timestamp(), 0)
    assert md["acme|2024-01-02"]["transfer_record"] == f"/assets/lake/orders?view=partitions&partition=acme%7C{days[-1]}"


def test_a_fan_out_staged_by_spark_splits_by_tenant_even_with_path_characters_in_its_values(
    spark, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    import incsync.transfer.reads

    monkeypatch.setattr(incsync.transfer.reads, "COLLECT_MAX_ROWS", 0)  # every read goes through Spark's partitioned write
    tenants = {"acme": "org/1 a=b%", "globex": "Org 2", "initech": "org_3"}
    write_table(tmp_path / "src", "orders", [
        order(1, tenants["acme"], ts(1, 1)), order(2, tenants["acme"], ts(2, 1)), order(3, tenants["globex"], ts(2, 2)),
        order(4, "org 2", ts(2, 3)),  # not globex: another case
    ])
    recipients = [{"id": rid, "id_in_provider_system": org, "destination": f"{rid}_delta"} for rid, org in tenants.items()]
    config = lake_config(tmp_path, recipients=recipients)
    dagster_instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, list(tenants))

    result = run_range(config, dagster_instance, ("2024-01-01", "acme"), ("2024-01-02", "initech"))

    assert result.success
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1, 2]
    assert [r["organization_id"] for r in delta_rows(tmp_path / "out" / "globex" / "orders")] == ["Org 2"]
    assert delta_rows(tmp_path / "out" / "initech" / "orders") == []


def test_the_cli_runs_every_enabled_recipient_in_one_run_and_names_the_one_that_failed(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from incsync.cli.main import main
    from incsync.operations.instance import dagster_instance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    write_table(tmp_path / "src", "orders", [
        order(1, "org_1", ts(2, 1)), order(2, "org_2", ts(2, 2)), order(2, "org_2", ts(2, 3)), order(3, "org_3", ts(2, 4)),
    ])
    recipients = [*THREE, {"id": "umbrella", "id_in_provider_system": "org_4", "destination": "umbrella_delta", "enabled": False}]
    config = lake_config(tmp_path, recipients=recipients)

    assert main(["transfer", "orders", "--window", "2024-01-02", "-c", str(config)]) == 1

    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "transfer orders → 3 recipients: 3 window(s) 2024-01-02 .. 2024-01-02"
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["acme", "globex", "initech"]
    assert "globex" in out.splitlines()[2] and "FAILED" in out.splitlines()[2]
    assert err.startswith("error: ValidationError: model orders, recipient globex: 1 primary key value(s)")
    instance = dagster_instance(config)
    assert len(instance.get_run_records()) == 1  # one run, one read for the three recipients
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [3]

    # --recipient repeats; globex lies between them in registration order, so each is a run of its own,
    # which carries the recipient's own tags.
    assert main(["transfer", "orders", "--window", "2024-01-02", "--recipient", "acme", "--recipient", "initech",
                 "-c", str(config)]) == 0
    runs = instance.get_run_records(limit=3)
    assert len(runs) == 3 and {r.dagster_run.tags.get("incsync/recipient") for r in runs[:2]} == {"acme", "initech"}


def test_incsync_transfers_shows_the_owner_of_each_destination_written(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from incsync.cli.main import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(2, 1)), order(2, "org_2", ts(2, 2))])
    config = lake_config(tmp_path, recipients=THREE[:2])
    assert main(["transfer", "orders", "--window", "2024-01-02", "-c", str(config)]) == 0
    capsys.readouterr()

    assert main(["transfers", "-c", str(config)]) == 0

    header, line = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[-5:] == ["delta", "duration", "owner(s)", "run", "tags"]
    fields = line.split()  # date, time, status, blamed, mode, model, recipients, windows, rows, delta, duration, owners, run
    assert fields[5:10] == ["orders", "acme,globex", "2", "2", "2"] and fields[11] == "acme,globex"
