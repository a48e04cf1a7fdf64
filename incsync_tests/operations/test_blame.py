"""Whose failure is it (issue 32): each recipient-side cause provoked on a real PostgreSQL, MariaDB or Delta destination,
each provider-side one on a real source, through real Dagster runs; the exact party and reason in the run's
tags, its failure metadata and `incsync transfers`."""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from incsync.config.load import load_config
from incsync.config.tags import BLAME_REASON_TAG, BLAMED_TAG
from incsync.operations.blame import recipients_blamed
from incsync.operations.partitions import RECIPIENTS_PARTITIONS, partition_key
from incsync.operations.statuses import list_transfers
from incsync.orchestration.definitions import build_definitions
from incsync_tests.support.destinations import ROLE_DSN_ENV
from incsync_tests.support.lake import delta_rows, lake_config, order, ts, write_table

LAKE = dg.AssetKey(["lake", "orders"])

PG = {"name": "acme_pg", "kind": "postgres", "dsn_env": ROLE_DSN_ENV, "schema": "acme"}
ACME_PG = {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_pg"}

GRANT = ("destination acme_pg denied incsync a privilege it needs: the recipient must grant the DSN's role USAGE and "
         "CREATE on its schema and write on its tables again")
LOGIN = ("destination acme_pg refused incsync's login: the recipient must restore the role's login or password, or "
         "send new credentials for the destination's DSN")
FILE_IN_THE_WAY = ("destination {}: a file stands where the destination's folder should be: the recipient must move "
                   "it away, or the provider points the destination elsewhere")


def run(config: Path, instance: dg.DagsterInstance, recipients: list[str], *, key: dg.AssetKey = LAKE,
        window: str = "2024-01-01") -> dg.ExecuteInProcessResult:
    """One run of ``window`` for ``recipients`` (registered in this order), as a backfill of the box."""
    missing = [r for r in recipients if not instance.has_dynamic_partition(RECIPIENTS_PARTITIONS, r)]
    if missing:
        instance.add_dynamic_partitions(RECIPIENTS_PARTITIONS, missing)
    job = build_definitions(config).resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=instance, asset_selection=[key], raise_on_error=False,
        tags={ASSET_PARTITION_RANGE_START_TAG: str(partition_key(window, recipients[0])),
              ASSET_PARTITION_RANGE_END_TAG: str(partition_key(window, recipients[-1]))},
    )


def blamed(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> tuple[str, str, dict[str, tuple[str, str]]]:
    """(the run's party tag, its reason tag, each failed recipient's (party, reason) from the failure metadata)."""
    assert not result.success
    tags = instance.get_run_by_id(result.run_id).tags
    per = {rid: (b.party.value, b.reason) for rid, b in recipients_blamed(instance, result.run_id).items()}
    return tags[BLAMED_TAG], tags[BLAME_REASON_TAG], per


def _admin(admin_dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _pg_config(tmp_path: Path) -> Path:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2))])
    return lake_config(tmp_path, recipients=[ACME_PG], destinations=[PG], model={"lookback_seconds": 0})


def test_a_grant_the_recipient_revoked_blames_the_recipient(spark, tmp_path: Path, dagster_instance, pg_role) -> None:
    role, admin_dsn = pg_role
    config = _pg_config(tmp_path)
    assert run(config, dagster_instance, ["acme"]).success
    _admin(admin_dsn, f'REVOKE USAGE, CREATE ON SCHEMA acme FROM "{role}"')

    result = run(config, dagster_instance, ["acme"])

    assert blamed(dagster_instance, result) == ("recipient", GRANT, {"acme": ("recipient", GRANT)})
    [failed] = list_transfers(dagster_instance, load_config(config), blamed="recipient")
    assert (failed.run_id, failed.blamed, failed.blame_reason) == (result.run_id, "recipient", GRANT)
    assert list_transfers(dagster_instance, load_config(config), blamed="provider") == []


def test_a_login_the_recipient_disabled_blames_the_recipient(spark, tmp_path: Path, dagster_instance, pg_role) -> None:
    """The server here trusts every local login (any password passes), so the recipient disables the role's
    login instead: the same SQLSTATE class (28, invalid authorization) as a wrong or rotated password."""
    from incsync.destinations.postgres.pool import close_pool

    role, admin_dsn = pg_role
    config = _pg_config(tmp_path)
    assert run(config, dagster_instance, ["acme"]).success
    _admin(admin_dsn, f'ALTER ROLE "{role}" NOLOGIN',
           f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
    close_pool(os.environ[ROLE_DSN_ENV])

    result = run(config, dagster_instance, ["acme"])

    assert blamed(dagster_instance, result) == ("recipient", LOGIN, {"acme": ("recipient", LOGIN)})
    run_tags = dagster_instance.get_run_by_id(result.run_id).tags
    assert not any(role in value and "@" in value for value in run_tags.values())  # no DSN in a tag


def test_a_primary_key_the_recipient_dropped_blames_the_recipient(spark, tmp_path: Path, dagster_instance, pg_role) -> None:
    """A dropped table is re-synced (no failure); a table whose primary key constraint the recipient dropped
    cannot take incsync's upsert (ON CONFLICT needs it): the recipient's change, SQLSTATE 42P10."""
    _, admin_dsn = pg_role
    config = _pg_config(tmp_path)
    assert run(config, dagster_instance, ["acme"]).success
    _admin(admin_dsn, "ALTER TABLE acme.orders DROP CONSTRAINT orders_pkey")
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 3))])

    result = run(config, dagster_instance, ["acme"])

    reason = ("destination acme_pg: the recipient changed its table so incsync cannot write it (SQLSTATE 42P10): "
              "the recipient must undo the change (see the run's error)")
    assert blamed(dagster_instance, result) == ("recipient", reason, {"acme": ("recipient", reason)})


def test_a_delta_folder_incsync_cannot_write_blames_the_recipient(spark, tmp_path: Path, dagster_instance) -> None:
    """Tests run as root here, where chmod stops no write: the recipient's folder is a regular file instead
    (its storage holding something else where its copy goes); as another user, a folder made read-only too."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1))])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "acme").write_text("not a folder")
    config = lake_config(tmp_path)

    result = run(config, dagster_instance, ["acme"])

    reason = FILE_IN_THE_WAY.format("acme_delta")
    assert blamed(dagster_instance, result) == ("recipient", reason, {"acme": ("recipient", reason)})
    denied = ("destination acme_delta may not be written to (permission denied on its folder): the recipient must "
              "give incsync write access to it again")
    if os.geteuid() != 0:
        (tmp_path / "out" / "acme").unlink()
        (tmp_path / "out").chmod(0o555)
        try:
            result = run(config, dagster_instance, ["acme"])
        finally:
            (tmp_path / "out").chmod(0o755)
        assert blamed(dagster_instance, result)[:2] == ("recipient", denied)
        return
    # Root writes through any mode bits; /sys refuses even root a folder (EPERM on sysfs, EROFS where it is
    # mounted read-only): a folder the recipient's storage will not let incsync create.
    try:
        os.mkdir("/sys/incsync-probe")
        os.rmdir("/sys/incsync-probe")
        pytest.skip("this machine lets root create folders under /sys")
    except OSError as exc:
        code = exc.errno
    expected = {errno.EPERM: denied, errno.EACCES: denied, errno.EROFS: (
        "destination acme_delta is on a read-only file system: the recipient must make it writable again, or move "
        "the destination")}[code]
    sysfs = lake_config(tmp_path, destinations=[{"name": "acme_delta", "kind": "delta", "path": f"/sys/incsync-{uuid.uuid4().hex[:8]}"}])
    assert blamed(dagster_instance, run(sysfs, dagster_instance, ["acme"]))[:2] == ("recipient", expected)


THREE = [
    {"id": "acme", "id_in_provider_system": "org_1", "destination": "acme_delta"},
    {"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_delta"},
    {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_delta"},
]


def test_one_recipient_of_a_fan_out_run_is_blamed_alone_and_the_others_publish(spark, tmp_path: Path, dagster_instance) -> None:
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_2", ts(1, 2)), order(3, "org_3", ts(1, 3))])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "globex").write_text("not a folder")
    config = lake_config(tmp_path, recipients=THREE)

    result = run(config, dagster_instance, ["acme", "globex", "initech"])

    reason = FILE_IN_THE_WAY.format("globex_delta")
    assert blamed(dagster_instance, result) == ("recipient", f"recipient globex: {reason}", {"globex": ("recipient", reason)})
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "acme" / "orders")] == [1]
    assert [r["id"] for r in delta_rows(tmp_path / "out" / "initech" / "orders")] == [3]
    cfg = load_config(config)
    [listed] = list_transfers(dagster_instance, cfg, recipient="globex", blamed="recipient")
    assert (listed.status.value, listed.blame_reason) == ("PARTIAL_FAILURE", reason)
    [same_run] = list_transfers(dagster_instance, cfg, recipient="acme")  # acme published: nothing of it is blamed
    assert (same_run.run_id, same_run.blamed) == (result.run_id, None)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
    assert failure.description.endswith(f"\n    blamed recipient: {reason}")


def test_a_duckdb_path_the_recipients_storage_blocks_blames_the_recipient(spark, tmp_path: Path, dagster_instance) -> None:
    """A file where acme's DuckDB file's folder goes, a folder where globex's DuckDB file goes: each is the
    recipient's, as a file in a Delta destination's way is; `incsync transfers` lists each with its reason."""
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_2", ts(1, 2))])
    (tmp_path / "not-a-folder").write_text("the recipient's")
    (tmp_path / "globex.duckdb").mkdir()
    config = lake_config(tmp_path, recipients=THREE[:2], destinations=[
        {"name": "acme_delta", "kind": "duckdb", "path": "./not-a-folder/acme.duckdb"},
        {"name": "globex_delta", "kind": "duckdb", "path": "./globex.duckdb"}])

    result = run(config, dagster_instance, ["acme", "globex"])

    file = FILE_IN_THE_WAY.format("acme_delta")
    folder = ("destination globex_delta: a folder stands where the destination's file should be: the recipient must "
              "move it away, or the provider points the destination elsewhere")
    assert blamed(dagster_instance, result) == ("recipient", f"recipient acme: {file}",
                                                {"acme": ("recipient", file), "globex": ("recipient", folder)})
    cfg = load_config(config)
    [acme] = list_transfers(dagster_instance, cfg, recipient="acme", blamed="recipient")
    [globex] = list_transfers(dagster_instance, cfg, recipient="globex", blamed="recipient")
    assert (acme.blame_reason, globex.blame_reason) == (file, folder)
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
    assert (f"destination acme_delta: cannot create the DuckDB file {tmp_path / 'not-a-folder' / 'acme.duckdb'}: "
            f"{tmp_path / 'not-a-folder'} is a file, where a folder should be") in failure.description
    assert f"destination globex_delta: the DuckDB file {tmp_path / 'globex.duckdb'} is a folder" in failure.description


def test_provider_side_failures_of_a_lake_source_blame_the_provider(spark, tmp_path: Path, dagster_instance) -> None:
    config = lake_config(tmp_path)
    (tmp_path / "src").mkdir()

    missing = run(config, dagster_instance, ["acme"])

    party, reason, per = blamed(dagster_instance, missing)
    assert (party, per["acme"][0]) == ("provider", "provider")
    assert reason == per["acme"][1] == (
        f"source lake: table folder {tmp_path / 'src' / 'orders'} does not exist; check `path` and the table name"
    )
    write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(1, "org_1", ts(1, 2))])

    duplicate = run(config, dagster_instance, ["acme"])

    contract = ("source rows break the model's contract (NULL or duplicate primary key, NULL last-modified): fix the "
                "rows at the source or the model's primary_key")
    assert blamed(dagster_instance, duplicate) == ("provider", contract, {"acme": ("provider", contract)})
    assert [t.blamed for t in list_transfers(dagster_instance, load_config(config))] == ["provider", "provider"]


def test_provider_side_failures_of_a_postgres_source_blame_the_provider(spark, tmp_path: Path, dagster_instance) -> None:
    from incsync_tests.support.jdbc import jdbc_config, pg_database

    db_key = dg.AssetKey(["db", "orders"])
    with pg_database() as db:
        config = jdbc_config(tmp_path, db)
        no_table = run(config, dagster_instance, ["acme"], key=db_key)
        party, reason, _ = blamed(dagster_instance, no_table)
        assert party == "provider"
        assert reason.startswith("source db: ") and reason.endswith(
            "check the model's source_table/source_query, columns and (schema tenancy) the recipient's schema")

        db.execute("CREATE TABLE orders (id int PRIMARY KEY, organization_id text, updated_at timestamptz, ends_at timestamptz)")
        db.execute("INSERT INTO orders VALUES (1, 'org_1', '2024-01-01 10:00+00', 'infinity')")
        unconvertible = run(config, dagster_instance, ["acme"], key=db_key)
        convert = "a source value cannot convert to its column's type: set `column_types` on the model (docs/types.md)"
        assert blamed(dagster_instance, unconvertible) == ("provider", convert, {"acme": ("provider", convert)})

        config = jdbc_config(tmp_path, db, source={"user": "incsync_no_such_role"})
        wrong_user = run(config, dagster_instance, ["acme"], key=db_key)
        party, reason, _ = blamed(dagster_instance, wrong_user)
        assert party == "provider"
        assert reason.startswith("source db: ") and "check `user` (incsync_no_such_role)" in reason


def test_a_column_type_the_recipient_changed_blames_the_recipient(spark, tmp_path: Path, dagster_instance, pg_role) -> None:
    """incsync's column registry says which type it published: a table whose column now has another type that
    cannot take the source's values was changed by the recipient, not by the source."""
    _, admin_dsn = pg_role
    config = _pg_config(tmp_path)
    assert run(config, dagster_instance, ["acme"]).success
    _admin(admin_dsn, "ALTER TABLE acme.orders ALTER COLUMN amount TYPE text")

    result = run(config, dagster_instance, ["acme"])

    reason = ("the recipient changed a column's type in its table: the recipient must change it back, or the provider "
              "runs a full refresh (see the run's error)")
    assert blamed(dagster_instance, result) == ("recipient", reason, {"acme": ("recipient", reason)})
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
    assert failure.metadata["error"].value == (
        "SchemaError: model orders, recipient acme: the recipient changed a column's type in acme.orders (column "
        "amount is text in acme.orders, where incsync published double precision); nothing was published. Fix: the "
        "recipient changes it back (ALTER TABLE acme.orders ALTER COLUMN amount TYPE double precision ...), or the "
        "provider reloads the copy with the source's types (incsync transfer orders --recipient acme --full-refresh)."
    )


def test_a_password_the_recipient_rotated_blames_the_recipient(spark, tmp_path: Path, dagster_instance,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A real wrong password: MariaDB checks passwords on this machine (PostgreSQL trusts local logins)."""
    from incsync_tests.support.destinations import MARIADB_ENV, mariadb_admin, mariadb_database, mariadb_databases

    user, hosts = f"incsync_w_{uuid.uuid4().hex[:8]}", ("%", "localhost")
    login = LOGIN.replace("acme_pg", "acme_maria")
    with mariadb_databases() as prefix:
        monkeypatch.setenv(MARIADB_ENV, prefix)
        admin = mariadb_admin()
        try:
            with admin.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{mariadb_database()}`")
                for host in hosts:
                    cur.execute(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY 'first-Pa55'")
                    cur.execute(f"GRANT ALL ON `{mariadb_database()}`.* TO '{user}'@'{host}'")
            monkeypatch.setenv("ACME_MARIADB_PASSWORD", "first-Pa55")
            write_table(tmp_path / "src", "orders", [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2))])
            maria = {"name": "acme_maria", "kind": "mariadb", "user": user, "password_env": "ACME_MARIADB_PASSWORD",
                     "database": mariadb_database()}
            config = lake_config(tmp_path, recipients=[{**ACME_PG, "destination": "acme_maria"}], destinations=[maria],
                                 model={"lookback_seconds": 0})
            assert run(config, dagster_instance, ["acme"]).success
            with admin.cursor() as cur:
                for host in hosts:
                    cur.execute(f"ALTER USER '{user}'@'{host}' IDENTIFIED BY 'rotated-Pa55'")

            result = run(config, dagster_instance, ["acme"])

            assert blamed(dagster_instance, result) == ("recipient", login, {"acme": ("recipient", login)})
            [failed] = list_transfers(dagster_instance, load_config(config), blamed="recipient")
            assert (failed.run_id, failed.blamed) == (result.run_id, "recipient")
            tags = dagster_instance.get_run_by_id(result.run_id).tags
            assert not any("first-Pa55" in value for value in tags.values())
        finally:
            with admin.cursor() as cur:
                for host in hosts:
                    cur.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")
            admin.close()
