"""Every error incsync raises on purpose lives in its package's ``errors.py`` and reaches the command line as
one clean line with the exit status of its kind: 2 when the file or the command line is wrong, 1 when the
work failed."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import incsync
from incsync.cli.main import run_guarded
from incsync.errors import ConfigError, IncsyncError, InputError
from incsync.secrets.errors import VaultError

MESSAGE = "model orders, recipient acme: something is wrong; do this to fix it"
# Classes whose constructor is not ``cls(message)``, and the line the command line prints for the sample.
SAMPLES: dict[type[IncsyncError], tuple[IncsyncError, str]] = {
    ConfigError: (ConfigError("incsync.yaml", ["models[orders].lookback: is negative; make it 0 or more"], [7]),
                  "error: incsync.yaml:7: models[orders].lookback: is negative — make it 0 or more"),
    VaultError: (VaultError("destinations[acme].dsn_secret: vault entry acme_pg does not exist in vault.sqlite; store it "
                            "with `incsync secrets set acme_pg`"),
                 "error: vault: destinations[acme].dsn_secret: vault entry acme_pg does not exist in vault.sqlite — store "
                 "it with `incsync secrets set acme_pg`"),
}
NOT_ERRORS_MODULES = {"incsync.definitions"}  # builds the Definitions of the working directory's file on import


def incsync_errors() -> list[type[IncsyncError]]:
    """``IncsyncError`` and every subclass defined in incsync (each module imported, so none is missed)."""
    for info in pkgutil.walk_packages(incsync.__path__, "incsync."):
        if info.name not in NOT_ERRORS_MODULES:
            importlib.import_module(info.name)
    found: list[type[IncsyncError]] = []
    todo = [IncsyncError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("incsync.") and cls not in found:
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: (cls.__module__, cls.__qualname__))


ERRORS = incsync_errors()


def test_the_walk_finds_the_errors_of_every_package() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"IncsyncError", "ConfigError", "InputError", "PublishError", "TagError", "StatusError", "WorkerError",
            "UsageError", "ManifestIntegrityError", "ConversionError", "TransferFailures", "MassDeleteError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_each_error_lives_in_its_packages_errors_module(cls: type[IncsyncError]) -> None:
    parts = cls.__module__.split(".")
    assert parts[-1] == "errors" and len(parts) <= 3, f"{cls.__qualname__} is defined in {cls.__module__}"


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_the_command_line_says_each_error_in_one_clean_line(cls: type[IncsyncError], capsys: pytest.CaptureFixture[str]) -> None:
    if cls in SAMPLES:
        error, line = SAMPLES[cls]
    else:
        assert cls.__init__ is Exception.__init__, f"{cls.__qualname__} takes other arguments: add a sample to SAMPLES"
        error, line = cls(MESSAGE), f"error: {MESSAGE}"

    def fail() -> int:
        raise error

    code = run_guarded(fail, command="transfer", config=None)
    out, err = capsys.readouterr()
    assert (out, err) == ("", line + "\n")
    assert code == (2 if issubclass(cls, (ConfigError, InputError)) else 1)
