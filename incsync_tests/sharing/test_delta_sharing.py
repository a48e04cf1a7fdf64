"""The official Delta Sharing client (`delta-sharing` on PyPI) against `incsync serve`: each recipient lists and
reads exactly its own copy, after a backfill, an incremental and a full refresh, at a past version or time, and
the changes between two versions where its table keeps them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import delta_sharing
import pandas as pd
import pytest
from delta_sharing.protocol import Schema, Share, Table
from requests.exceptions import HTTPError

from incsync.sharing import delta_log
from incsync_tests.sharing.conftest import DAY1, World
from incsync_tests.support.lake import order, ts

DAY2 = [order(1, "org_1", ts(2, 1), status="paid"), *DAY1[1:], order(4, "org_1", ts(2, 3)), order(7, "org_2", ts(2, 4))]
DAY3 = [r for r in DAY2 if r["id"] != 2]  # deleted at the source: only a full refresh takes it out of the copy


def rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    return sorted((int(r.id), r.organization_id, r.status, float(r.amount), pd.Timestamp(r.updated_at).isoformat())
                  for r in frame.itertuples())


def expected(source: list[dict[str, Any]], org: str) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["organization_id"], r["status"], r["amount"], r["updated_at"].isoformat())
                  for r in source if r["organization_id"] == org)


def changed(frame: pd.DataFrame) -> list[tuple[int, str, str]]:
    return sorted(zip(frame["id"].astype(int), frame["status"], frame["_change_type"], strict=False))


def iso_ms(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_each_profile_lists_exactly_its_recipients_share_and_tables(world: World) -> None:
    for recipient in ("acme", "globex"):
        client = delta_sharing.SharingClient(world.profile(recipient))
        assert client.list_shares() == [Share(name=recipient)]
        assert client.list_schemas(Share(name=recipient)) == [Schema(name="sales", share=recipient)]
        assert client.list_tables(Schema(name="sales", share=recipient)) == [Table(name="orders", share=recipient, schema="sales")]
        assert client.list_all_tables() == [Table(name="orders", share=recipient, schema="sales")]


def test_a_second_recipients_profile_reads_none_of_the_firsts(world: World) -> None:
    assert rows(delta_sharing.load_as_pandas(world.url("globex"))) == expected(DAY1, "org_2")
    for fragment in ("acme.sales.orders", "ACME.Sales.Orders", "acme.default.orders"):
        with pytest.raises(HTTPError) as refused:
            delta_sharing.load_as_pandas(f"{world.profile('globex')}#{fragment}")
        assert refused.value.response.status_code == 404
        assert "acme" not in refused.value.response.text


def test_names_compare_without_case(world: World) -> None:
    assert rows(delta_sharing.load_as_pandas(world.url("globex", "SALES.Orders", share="GLOBEX"))) == expected(DAY1, "org_2")


def test_reads_follow_the_copy_through_backfill_incremental_and_full_refresh(world: World) -> None:
    url = world.url("acme")
    backfill = delta_sharing.get_table_version(url)
    assert rows(delta_sharing.load_as_pandas(url)) == expected(DAY1, "org_1")

    world.write_source(DAY2)
    world.transfer("acme", "2024-01-02", scheduled=True)
    incremental = delta_sharing.get_table_version(url)
    assert incremental == backfill + 1
    assert rows(delta_sharing.load_as_pandas(url)) == expected(DAY2, "org_1")
    assert rows(delta_sharing.load_as_pandas(url, version=backfill)) == expected(DAY1, "org_1")
    when = iso_ms(delta_log.commit_timestamp(str(world.root / "out/acme/orders"), backfill))
    assert rows(delta_sharing.load_as_pandas(url, timestamp=when)) == expected(DAY1, "org_1")
    assert delta_sharing.get_table_version(url, starting_timestamp=when) == backfill
    changes = delta_sharing.load_table_changes_as_pandas(url, starting_version=incremental, ending_version=incremental)
    assert changed(changes) == [(1, "new", "update_preimage"), (1, "paid", "update_postimage"), (4, "new", "insert")]
    assert set(changes["_commit_version"]) == {incremental}

    world.write_source(DAY3)
    world.transfer("acme", "2024-01-02", scheduled=False, full_refresh=True)
    refresh = delta_sharing.get_table_version(url)
    assert rows(delta_sharing.load_as_pandas(url)) == expected(DAY3, "org_1")
    assert changed(delta_sharing.load_table_changes_as_pandas(url, starting_version=refresh)) == [
        (1, "paid", "delete"), (1, "paid", "insert"), (2, "new", "delete"), (4, "new", "delete"), (4, "new", "insert"),
    ]
    everything = delta_sharing.load_table_changes_as_pandas(url, starting_version=0)
    assert sorted(set(everything["_commit_version"])) == [backfill, incremental, refresh]
    assert rows(delta_sharing.load_as_pandas(world.url("globex"))) == expected(DAY1, "org_2")  # untouched


def test_changes_of_a_table_without_change_data_answer_the_protocols_error(world: World) -> None:
    with pytest.raises(HTTPError) as refused:
        delta_sharing.load_table_changes_as_pandas(world.url("globex"), starting_version=0)
    assert refused.value.response.status_code == 400
    assert refused.value.response.json() == {
        "errorCode": "INVALID_PARAMETER_VALUE",
        "message": "Error getting change data for range [0, 1] as change data was not recorded for version [0]",
    }


def test_a_version_past_the_latest_is_a_400_naming_it(world: World) -> None:
    answer = world.post("/shares/globex/schemas/sales/tables/orders/query", world.token("globex"), {"version": 99})
    assert answer.status_code == 400 and "99" in answer.json()["message"]
    answer = world.get("/shares/globex/schemas/sales/tables/orders/changes?startingVersion=5", world.token("globex"))
    assert answer.status_code == 400
    assert answer.json()["message"].startswith("Provided start version(5) for reading change data is invalid")
