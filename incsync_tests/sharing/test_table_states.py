"""The server keeps each committed version's state of a local table and reads the log again only when a newer
commit exists or the commit file it was read from changed (the table deleted and created again)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from incsync.sharing import delta_log


def _write(root: Path, ids: list[int], *, mode: str = "append") -> None:
    write_deltalake(str(root), pa.table({"id": pa.array(ids, pa.int64())}), mode=mode)


def test_a_kept_state_is_answered_until_a_newer_version_exists(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write(root, [1])
    first = delta_log.table_state(str(root))
    assert (first.version, len(first.files)) == (0, 1)
    assert delta_log.table_state(str(root)) is first  # kept: no log read
    assert delta_log.table_state(str(root), with_files=False) is first  # a state with files serves one without
    assert delta_log.latest_version(str(root)) == 0

    _write(root, [2])
    second = delta_log.table_state(str(root))
    assert (second.version, len(second.files)) == (1, 2)
    assert delta_log.latest_version(str(root)) == 1
    assert delta_log.table_state(str(root), 0) is first  # a past version is still its own state
    bare = delta_log.table_state(str(root), 1, with_files=False)
    assert bare is second


def test_a_table_created_again_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write(root, [1])
    _write(root, [2])
    assert delta_log.table_state(str(root)).version == 1
    shutil.rmtree(root)  # a destination reset: the same folder, a new table with fewer versions
    _write(root, [7, 8, 9])
    again = delta_log.table_state(str(root))
    assert (again.version, again.files[0].size > 0, len(again.files)) == (0, True, 1)
    assert delta_log.latest_version(str(root)) == 0
    shutil.rmtree(root)  # and created again at the same version number, other content
    write_deltalake(str(root), pa.table({"id": pa.array([1], pa.int64()), "name": ["x"]}))
    other = delta_log.table_state(str(root))
    assert other.version == 0 and "name" in other.metadata["schemaString"]
    assert delta_log.table_state(str(root), 0) is other
