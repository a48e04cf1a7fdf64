"""docs/config.md is current, every example validates, and `incsync init` writes a starter that validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from incsync.cli.main import main
from incsync.config.destinations import DESTINATION_MODELS, model_kinds
from incsync.config.docs import render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples").glob("*/incsync.yaml"))
STARTER_KINDS = [kind for kind, model in DESTINATION_MODELS.items() if model_kinds(model)[0] == kind]  # no aliases


def test_config_reference_is_generated_from_the_fields() -> None:
    assert (ROOT / "docs" / "config.md").read_text() == render(), (
        "docs/config.md is stale: run `python scripts/gen_config_docs.py`"
    )


def test_the_three_examples_ship() -> None:
    assert EXAMPLES == ["lake-to-delta", "mariadb-to-object-storage", "postgres-to-postgres"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_validates(name: str, capsys) -> None:
    file = ROOT / "examples" / name / "incsync.yaml"
    assert main(["validate", "-c", str(file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{file}: OK (1 sources, ")


@pytest.mark.parametrize("source", ["lake", "postgres", "mysql", "mariadb"])
@pytest.mark.parametrize("destination", STARTER_KINDS)
def test_init_writes_a_commented_starter_that_validates(tmp_path: Path, capsys, source: str, destination: str) -> None:
    file = tmp_path / "incsync.yaml"
    assert main(["init", "--source", source, "--destination", destination, "-o", str(file)]) == 0
    assert capsys.readouterr().out == (
        f"wrote {file}: edit the names marked in its comments, then `incsync validate -c {file}`\n"
    )
    text = file.read_text()
    assert text.startswith(f"# incsync configuration: {source} -> {destination}.")
    assert f"vendor: {source}" in text and f"kind: {destination}" in text
    assert main(["validate", "-c", str(file)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{file}: OK (1 sources, 1 destinations, 1 models, 1 recipients)"
    assert main(["init", "-o", str(file)]) == 2  # never overwrites without --force
    assert capsys.readouterr().err == (
        f"error: {file} exists; choose another file with -o, or overwrite it with --force\n"
    )


def test_the_designs_example_file_loads(tmp_path: Path) -> None:
    """docs/design.md#the-file-by-example is a file incsync loads as it stands."""
    import re

    from incsync.config.load import load_config

    design = (ROOT / "docs" / "design.md").read_text()
    block = re.search(r"### The file, by example\n.*?```yaml\n(.*?)```", design, re.S)
    assert block, "docs/design.md lost its example file"
    file = tmp_path / "incsync.yaml"
    file.write_text(block.group(1))
    config = load_config(file)
    assert [s.name for s in config.sources] == ["app_db", "lake"]
    assert [d.name for d in config.destinations] == ["acme_delta", "globex_pg", "initech_files"]
    assert [(m.model_name, m.primary_key) for m in config.models] == [("orders", ["id"])]
    assert [(r.id, r.id_in_provider_system, r.destination) for r in config.recipients] == [
        ("acme", "org_1", "acme_delta")]
