"""Every destination records whose copy it holds; a publish for anyone else fails before writing (issue 22).

The basic refusal (a second recipient on the same copy) is the conformance suite's
(``incsync_tests/destinations/conformance/test_publish.py``); these are the kinds' repointing, adoption and moves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from incsync.cli.main import run_command
from incsync.destinations.ownership import OWNER_PROPERTY
from incsync.errors import OwnershipError
from incsync_tests.support import arrow_transfer
from incsync_tests.support.destinations import MATRIX_KINDS, PG_DSN_ENV, Target, destination_env, destination_spec
from incsync_tests.support.lake import lake_config, order, ts, write_table

SOURCE = [order(1, "org_1", ts(1, 1)), order(2, "org_1", ts(1, 2)), order(3, "org_2", ts(1, 3)), order(4, "org_2", ts(1, 4))]


@pytest.fixture(params=MATRIX_KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    with destination_env(request.param, monkeypatch):
        yield request.param


def _config(root: Path, kind: str, recipient: str, tenant: str, name: str = "incsync.yaml", dest: str = "dest") -> Path:
    """A config file in ``root`` whose one recipient writes to the shared ``./out/shared`` (or schema ``acme``)."""
    path = lake_config(
        root, recipients=[{"id": recipient, "id_in_provider_system": tenant, "destination": dest}],
        destinations=[destination_spec(kind, name=dest, folder="./out/shared")],
    )
    if name != "incsync.yaml":
        path = path.rename(root / name)
    return path


def _org(rows: list[dict[str, Any]], org: str) -> list[int]:
    return sorted(r["id"] for r in rows if r["organization_id"] == org)


@pytest.mark.parametrize("kind", ["delta", "postgres"], indirect=True)  # object storage: a folder per recipient id
def test_a_repointed_recipient_is_refused(kind: str, tmp_path: Path) -> None:
    """globex's destination is edited to point at acme's location; acme's block is gone from the file."""
    write_table(tmp_path / "src", "orders", SOURCE)
    config = _config(tmp_path, kind, "acme", "org_1")
    arrow_transfer.run(config, "2024-01-01", scheduled=False)
    doc = yaml.safe_load(config.read_text())
    doc["recipients"] = [{"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_dest"}]
    doc["destinations"][0]["name"] = "globex_dest"
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(OwnershipError, match="belongs to recipient acme \\(tenant org_1\\); refusing to publish "
                       "recipient globex \\(tenant org_2\\)"):
        arrow_transfer.run(config, "2024-01-01", scheduled=False, recipient_id="globex")
    rows = Target(config, recipient="globex").raw_rows()
    assert (_org(rows, "org_1"), _org(rows, "org_2")) == ([1, 2], [])


def test_delta_table_written_before_stamps_is_adopted_only_by_the_recipient_its_log_names(tmp_path: Path) -> None:
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    from incsync.destinations.base import TransferRecord
    from incsync.destinations.delta.state import RECORD_KEY

    write_table(tmp_path / "src", "orders", SOURCE)
    acme = _config(tmp_path, "delta", "acme", "org_1", name="a.yaml")
    globex = _config(tmp_path, "delta", "globex", "org_2", name="b.yaml")
    table = tmp_path / "out" / "shared" / "orders"
    legacy = TransferRecord(
        transfer_id="20240101T000000Z-000000000000", model_name="orders", recipient_id="acme",
        window_start="2024-01-01T00:00:00+00:00", window_end="2024-01-02T00:00:00+00:00",
        lower_bound="2024-01-01T00:00:00+00:00", upper_bound="2024-01-02T00:00:00+00:00", rows_transferred=1,
        delta_rows_transferred=1, high_watermark_micros=None, transfer_type="INCREMENTAL", fingerprint="x",
        lookback_seconds=300, committed_at="2024-01-02T00:00:00Z",
    )
    import pyarrow as pa

    from incsync_tests.support.lake import ORDERS_SCHEMA

    write_deltalake(str(table), pa.Table.from_pylist([SOURCE[0]], schema=ORDERS_SCHEMA), mode="append",
                    commit_properties=CommitProperties(custom_metadata={RECORD_KEY: legacy.to_json()}))

    with pytest.raises(OwnershipError) as info:
        arrow_transfer.run(globex, "2024-01-01", scheduled=False, recipient_id="globex")
    assert str(info.value).startswith(
        f"model orders: Delta table {table.resolve()} (destination dest) has no incsync owner stamp and its transfer "
        "log names recipient(s) acme; refusing to publish recipient globex (tenant org_2) there, nothing was written."
    )
    assert OWNER_PROPERTY not in DeltaTable(str(table)).metadata().configuration

    arrow_transfer.run(acme, "2024-01-01", scheduled=False)
    stamp = json.loads(DeltaTable(str(table)).metadata().configuration[OWNER_PROPERTY])
    assert stamp == {"model": "orders", "recipient": "acme", "tenant": "org_1"}
    assert _org(Target(acme).raw_rows(), "org_2") == []


def test_a_foreign_delta_table_without_log_is_not_adopted(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from incsync_tests.support.lake import ORDERS_SCHEMA

    write_table(tmp_path / "src", "orders", SOURCE)
    config = _config(tmp_path, "delta", "acme", "org_1")
    write_deltalake(str(tmp_path / "out" / "shared" / "orders"), pa.Table.from_pylist([SOURCE[2]], schema=ORDERS_SCHEMA))
    with pytest.raises(OwnershipError, match="has no incsync owner stamp and its transfer log does not name recipient acme"):
        arrow_transfer.run(config, "2024-01-01", scheduled=False)


def test_postgres_table_written_before_stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    with destination_env("postgres", monkeypatch):
        write_table(tmp_path / "src", "orders", SOURCE)
        acme = _config(tmp_path, "postgres", "acme", "org_1", name="a.yaml")
        globex = _config(tmp_path, "postgres", "globex", "org_2", name="b.yaml")
        arrow_transfer.run(acme, "2024-01-01", scheduled=False)
        import os

        with psycopg.connect(os.environ[PG_DSN_ENV], autocommit=True) as conn:
            conn.execute("DROP TABLE acme._incsync_owners")  # as a table written before this change
        with pytest.raises(OwnershipError, match="has no incsync owner stamp and its transfer log names recipient\\(s\\) acme"):
            arrow_transfer.run(globex, "2024-01-01", scheduled=False, recipient_id="globex")
        arrow_transfer.run(acme, "2024-01-02", scheduled=False)
        with psycopg.connect(os.environ[PG_DSN_ENV], autocommit=True) as conn:
            rows = conn.execute("SELECT recipient_id, tenant, reason FROM acme._incsync_owners ORDER BY seq").fetchall()
        assert len(rows) == 1 and rows[0][:2] == ("acme", "org_1") and rows[0][2].startswith("adopted by transfer ")
        assert _org(Target(acme).raw_rows(), "org_2") == []


def test_transfer_ownership_is_explicit_and_logged(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_table(tmp_path / "src", "orders", SOURCE)
    first = _config(tmp_path, kind, "acme", "org_1", name="a.yaml")
    intruder = "acme" if kind == "object_storage" else "globex"
    second = _config(tmp_path, kind, intruder, "org_2", name="b.yaml")
    arrow_transfer.run(first, "2024-01-01", scheduled=False)

    assert run_command(["transfer-ownership", "orders", "--to", intruder, "--reason", "INC-7", "-c", str(second)]) == 0
    assert capsys.readouterr().out == (
        f"model orders: destination dest now belongs to recipient {intruder} (tenant org_2); previous owner: "
        "recipient acme (tenant org_1). Its next transfer re-syncs the copy from the recipient's start.\n"
    )
    with pytest.raises(OwnershipError, match=f"belongs to recipient {intruder} \\(tenant org_2\\); refusing to publish "
                       "recipient acme \\(tenant org_1\\)"):
        arrow_transfer.run(first, "2024-01-01", scheduled=False)
    outcome = arrow_transfer.run(second, "2024-01-01", scheduled=False, recipient_id=intruder)
    assert outcome.destination_metadata["destination_owner"] == intruder
    assert outcome.full_refresh_reason == (
        f"destination_reset: ownership moved to recipient {intruder} (tenant org_2) by `incsync transfer-ownership`; "
        "the copy is re-synced from its start"
    )
    target = Target(second, recipient=intruder)
    assert (_org(target.rows(), "org_1"), _org(target.rows(), "org_2")) == ([], [3, 4])
    assert target.state().reset_reason is None
    again = arrow_transfer.run(second, "2024-01-01", scheduled=False, recipient_id=intruder)
    assert again.full_refresh_reason is None and again.record.transfer_type == "INCREMENTAL"


@pytest.mark.parametrize("kind", ["delta", "postgres"], indirect=True)
def test_two_first_transfers_racing_for_one_table_leave_one_owner(kind: str, tmp_path: Path) -> None:
    import threading

    write_table(tmp_path / "src", "orders", SOURCE)
    configs = {"acme": _config(tmp_path, kind, "acme", "org_1", name="a.yaml"),
               "globex": _config(tmp_path, kind, "globex", "org_2", name="b.yaml")}
    start = threading.Barrier(2)
    results: dict[str, object] = {}

    def run(rid: str) -> None:
        start.wait()
        try:
            results[rid] = arrow_transfer.run(configs[rid], "2024-01-01", scheduled=False, recipient_id=rid)
        except OwnershipError as exc:
            results[rid] = exc

    threads = [threading.Thread(target=run, args=(rid,)) for rid in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    winners = [rid for rid, r in results.items() if not isinstance(r, OwnershipError)]
    losers = [rid for rid, r in results.items() if isinstance(r, OwnershipError)]
    assert len(winners) == 1 and len(losers) == 1, results
    rows = Target(configs[winners[0]], recipient=winners[0]).raw_rows()
    tenant = {"acme": "org_1", "globex": "org_2"}
    assert {r["organization_id"] for r in rows} == {tenant[winners[0]]}
    assert f"belongs to recipient {winners[0]} (tenant {tenant[winners[0]]}); refusing to publish recipient {losers[0]}" in str(results[losers[0]])
