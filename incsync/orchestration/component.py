"""incsync as a Dagster component: a project adds it with ``dg scaffold defs incsync.IncsyncComponent <name>`` and
names its incsync.yaml in the ``defs.yaml`` that writes; the component's definitions are the ones incsync's own code
location builds from that file (``build_definitions``): the models as assets, their sensors, schedules, checks,
jobs and resources (docs/dagster.md).

``dg`` finds the type through the ``dagster_dg_cli.registry_modules`` entry point ``incsync`` (pyproject.toml), so
``incsync`` lists it and ``incsync.IncsyncComponent`` names it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import BaseModel, Field

from incsync.errors import ConfigError
from incsync.paths import DEFAULT_CONFIG_FILE

_CONFIG_PATH_HELP = ("The incsync configuration file: absolute, or relative to the folder of this defs.yaml "
                     f"(default: {DEFAULT_CONFIG_FILE} beside it).")


class IncsyncScaffoldParams(BaseModel):
    """What ``dg scaffold defs incsync.IncsyncComponent <name> --config-path FILE`` may say."""

    config_path: str | None = Field(default=None, description=_CONFIG_PATH_HELP)


class IncsyncScaffolder(dg.Scaffolder[IncsyncScaffoldParams]):
    """Writes the ``defs.yaml`` naming the incsync file (``--config-path``, else incsync.yaml beside it)."""

    @classmethod
    def get_scaffold_params(cls) -> type[IncsyncScaffoldParams]:
        return IncsyncScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[IncsyncScaffoldParams]) -> None:
        from dagster.components import scaffold_component

        scaffold_component(request, {"config_path": request.params.config_path or DEFAULT_CONFIG_FILE})


@dg.scaffold_with(IncsyncScaffolder)
class IncsyncComponent(dg.Component, dg.Resolvable, dg.Model):
    """incsync's models as assets, with their sensors, schedules, checks, jobs and resources.

    Built from the incsync configuration file ``config_path`` names, as incsync's own code location builds them
    (``incsync.orchestration.definitions.build_definitions``)."""

    config_path: str = Field(default=DEFAULT_CONFIG_FILE, description=_CONFIG_PATH_HELP)

    def config_file(self, folder: Path) -> Path:
        """The file ``config_path`` names, for a defs.yaml in ``folder``; a ConfigError where there is none."""
        file = Path(self.config_path).expanduser()
        file = (file if file.is_absolute() else folder / file).resolve()
        if not file.is_file():
            raise ConfigError(str(file), [
                f"file not found; the incsync component's defs.yaml in {folder} names it as "
                f"config_path: {self.config_path!r} (absolute, or relative to that folder): write the file there "
                "(`incsync init`) or change config_path"
            ])
        return file

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from incsync.orchestration.definitions import build_definitions

        folder = context.path if context.path.is_dir() else context.path.parent
        return build_definitions(self.config_file(folder))
