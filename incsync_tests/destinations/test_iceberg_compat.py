"""Pins the private pyiceberg names ``incsync.destinations.iceberg.compat`` uses: a pyiceberg upgrade
that moves one fails here, by name, rather than in a publish."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.types import DecimalType, LongType, StringType, TimestamptzType

from incsync.destinations.iceberg.compat import iceberg_type, scan_files, table_io, write_data_files

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "status": ["a", "b", "c"]})


def test_the_private_pyiceberg_names_the_destination_uses(tmp_path: Path) -> None:
    catalog = SqlCatalog("incsync", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("acme")
    table = catalog.create_table("acme.orders", schema=ROWS.schema)
    table.append(ROWS)

    tx = table.transaction()
    assert [t.file.record_count for t in scan_files(tx)] == [3]
    assert len(scan_files(tx, EqualTo("id", 9))) == 0  # the file's statistics rule key 9 out
    assert table_io(tx) is table.io
    update = tx.update_snapshot(snapshot_properties={"incsync.transfer": "t2"})
    with update.fast_append() as producer:
        files = write_data_files(tx, write_uuid=producer.commit_uuid, rows=ROWS.slice(0, 1))
        assert [f.record_count for f in files] == [1]
        for f in files:
            producer.append_data_file(f)
    tx.commit_transaction()
    table = catalog.load_table("acme.orders")
    assert table.current_snapshot().summary["incsync.transfer"] == "t2"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 1, 2, 3]

    assert iceberg_type(pa.int64()) == LongType()
    assert iceberg_type(pa.string()) == StringType()
    assert iceberg_type(pa.decimal128(38, 9)) == DecimalType(38, 9)
    assert iceberg_type(pa.timestamp("us", tz="UTC")) == TimestamptzType()
