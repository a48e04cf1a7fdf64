"""A model's ``cluster_by`` (Delta files ordered and pruned by a column a key never changes): each bad
value gets one exact message, and validate says which recipients' destinations ignore it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.cli.main import run_command
from incsync_tests.config.test_config import _base, _problems


@pytest.mark.parametrize(("cluster_by", "problem"), [
    (["created_at"], 'models[0].cluster_by: column "created_at" is not in columns [id, organization_id, status, amount, '
                     'updated_at]; fix its spelling or add it to columns'),
    (["updated_at"], 'models[0].cluster_by: "updated_at" is the last_modified_column, which every change moves; cluster '
                     "by a column a key never changes, such as its creation date"),
    (["id"], 'models[0].cluster_by: "id" is in the primary_key, by which files are already ordered and pruned; name '
             "another column or drop cluster_by"),
    (["status", "status"], 'models[0].cluster_by[1]: column "status" is named twice; name it once'),
])
def test_a_bad_cluster_by_is_named_with_the_fix(cluster_by: list[str], problem: str) -> None:
    doc = _base()
    doc["models"][0]["cluster_by"] = cluster_by
    assert _problems(doc) == [problem]


def test_validate_says_which_recipients_ignore_cluster_by(tmp_path: Path, capsys) -> None:
    doc = _base()
    doc["models"][0]["cluster_by"] = ["organization_id"]
    doc["recipients"] += [{"id": "globex", "id_in_provider_system": "org_2", "destination": "globex_pg"},
                          {"id": "initech", "id_in_provider_system": "org_3", "destination": "initech_files"}]
    file = tmp_path / "incsync.yaml"
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_command(["validate", "-c", str(file)]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if "cluster_by" in x)
    cluster_line = file.read_text().splitlines().index("  cluster_by:") + 1
    assert line == (f"warning: {file}:{cluster_line}: models[0].cluster_by: only delta destinations cluster files — it is "
                    "ignored for globex (postgres), initech (object_storage)")
