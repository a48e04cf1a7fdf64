"""The private pyiceberg 0.12 names the Iceberg destination needs, in one place (pinned by
``incsync_tests/destinations/test_iceberg_compat.py``).

pyiceberg's public write paths (``append``, ``overwrite``, ``upsert``) cannot express the tie-break upsert
with its record in one snapshot, so the destination plans files and builds the snapshot itself from these.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Transaction
    from pyiceberg.types import IcebergType


def scan_files(tx: Transaction, row_filter: BooleanExpression | None = None) -> list[FileScanTask]:
    """The scan tasks of the transaction's current snapshot (whose statistics admit ``row_filter``)."""
    scan = tx._scan() if row_filter is None else tx._scan(row_filter=row_filter)  # noqa: SLF001 - see the module
    return list(scan.plan_files())


def table_io(tx: Transaction) -> FileIO:
    """The FileIO of the transaction's table."""
    return tx._table.io  # noqa: SLF001 - see the module


def write_data_files(tx: Transaction, *, write_uuid: uuid.UUID, rows: pa.Table) -> list[DataFile]:
    """``rows`` written as data files of the transaction's table, for a snapshot producer to add."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    return list(_dataframe_to_data_files(table_metadata=tx.table_metadata, write_uuid=write_uuid, df=rows, io=table_io(tx)))


def iceberg_type(t: pa.DataType) -> IcebergType:
    """The Iceberg type pyiceberg gives an Arrow type."""
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids

    return _pyarrow_to_schema_without_ids(pa.schema([pa.field("c", t)])).find_field("c").field_type
