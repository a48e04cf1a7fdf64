"""Dagster resources: a lazy Spark session, one resource per source, one per destination kind,
and the recipient registry. None of them starts a JVM or opens a connection until used."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from incsync.config.load import load_config
from incsync.config.model import IncsyncConfig, ModelConfig, RecipientConfig
from incsync.destinations.registry import Destination, build_destination
from incsync.errors import ConfigError
from incsync.sources.registry import Source, build_source
from incsync.spark.session import spark_config, workers_use_this_python


class SparkResource(LazyPySparkResource):
    """The run's Spark session, started on first use; its Python workers run this interpreter."""

    @property
    def spark_session(self) -> Any:
        workers_use_this_python()
        return super().spark_session


def spark_resource(
    overrides: dict[str, str] | None = None, *, extra_jars: Sequence[str] = (), packages: Sequence[str] = ()
) -> SparkResource:
    return SparkResource(spark_config=spark_config(overrides, extra_jars=extra_jars, packages=packages))


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int, period: int) -> IncsyncConfig:
    del mtime_ns, size, period  # part of the cache key: an edited file (or a due table read) is read again
    return load_config(path)


def cached_config(path: str) -> IncsyncConfig:
    """The file parsed once per process, and again only when its path, mtime or size changes; with
    ``recipients_from``, also every ``refresh_seconds`` (the table's rows may change)."""
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except FileNotFoundError:
        return load_config(file)  # raises the clear "file not found" error
    config = _load(str(file), stat.st_mtime_ns, stat.st_size, 0)
    if config.recipients_from is None:
        return config
    every = config.recipients_from.refresh_seconds
    if every == 0:
        return load_config(file)
    return _load(str(file), stat.st_mtime_ns, stat.st_size, int(time.time() // every) + 1)


class IncsyncConfigResource(dg.ConfigurableResource):
    """The configuration file and the recipient registry it holds."""

    config_path: str = Field(description="Path of the incsync YAML file.")

    @property
    def config(self) -> IncsyncConfig:
        return cached_config(self.config_path)

    def recipients(self, *, enabled_only: bool = False) -> list[RecipientConfig]:
        return [r for r in self.config.recipients if r.enabled or not enabled_only]

    def recipient(self, recipient_id: str) -> RecipientConfig:
        try:
            return self.config.recipient(recipient_id)
        except KeyError as exc:
            raise ConfigError(self.config_path, [f"recipients: {exc.args[0]}; add it to the file or remove the partition"]) from None

    def model(self, name: str) -> ModelConfig:
        return self.config.model(name)


class SourceResource(dg.ConfigurableResource):
    """One configured source."""

    config_path: str
    source_name: str

    def client(self) -> Source:
        return build_source(cached_config(self.config_path).source(self.source_name))


class DestinationKindResource(dg.ConfigurableResource):
    """All destinations of one kind (delta, postgres, object_storage)."""

    config_path: str
    kind: str

    def client(self, name: str) -> Destination:
        config = cached_config(self.config_path).destination(name)
        if config.kind != self.kind:
            raise ConfigError(self.config_path, [f'destinations: "{name}" is of kind {config.kind}, not {self.kind}'])
        return build_destination(config)


def source_resource_key(source_name: str) -> str:
    return f"source_{source_name}"


def destination_resource_key(kind: str) -> str:
    return f"{kind}_destination"


def recipient_destination(resources: Any, recipient: RecipientConfig) -> Destination:
    """``recipient``'s destination, built by its kind's resource among ``resources`` (a step's or an IO
    manager's, holding ``incsync`` and the destination kinds' resources)."""
    kind = resources.incsync.config.destination(recipient.destination).kind
    return getattr(resources, destination_resource_key(kind)).client(recipient.destination)

