"""`incsync init --destination KIND` offers exactly the kinds the file model has, read only when it is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from incsync.cli.main import build_parser, main
from incsync.config.destinations import DESTINATION_MODELS, model_kinds


def test_init_offers_each_kind_of_the_models_and_no_alias(capsys: pytest.CaptureFixture[str]) -> None:
    kinds = [kind for kind, model in DESTINATION_MODELS.items() if model_kinds(model)[0] == kind]
    assert len(kinds) == len(set(DESTINATION_MODELS.values())) and "delta" in kinds and "mysql" not in kinds
    with pytest.raises(SystemExit):
        build_parser().parse_args(["init", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"--destination KIND the destination's kind: {', '.join(kinds)} (default delta)" in help_text

    assert main(["init", "--destination", "mysql", "-o", "unused.yaml"]) == 2  # an alias writes no starter of its own
    quoted = ", ".join(repr(k) for k in kinds)
    assert capsys.readouterr().err == (f"error: incsync init: argument --destination: invalid choice: 'mysql' "
                                       f"(choose from {quoted}) — see `incsync init --help`\n")


def test_the_parser_loads_no_destination_model() -> None:
    """`incsync transfer --worker` is a thin client: building the parser imports neither pydantic nor the
    kinds' models, which `--destination` reads only when `incsync init` runs."""
    probe = ("import sys; from incsync.cli.main import build_parser; build_parser(); "
             "print(sorted(m for m in ('pydantic', 'incsync.config.destinations', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
