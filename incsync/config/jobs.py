"""The provider's own jobs beside the transfers: `maintenance:` (compaction and vacuum of the destinations)
and `audit:` (the transfer log written to one of the provider's destinations)."""

from __future__ import annotations

from pydantic import Field

from incsync.config.base import StrictModel

# The transfer log's tables' source, as the destinations see them, and its asset's group (operations.audit,
# sharing.audit's read log, orchestration.housekeeping).
AUDIT_GROUP = "incsync_audit"


class MaintenanceConfig(StrictModel):
    """When ``incsync maintain`` runs on its own: compaction, vacuum and log checkpoints of the destinations."""

    frequency: str = Field(
        default="0 3 * * *",
        description="Cron of the `incsync_maintenance` schedule (Dagster), which maintains every destination of "
        "an enabled recipient; `incsync maintain` runs the same from the command line.",
    )
    compact: bool = Field(
        default=True,
        description="Rewrite a Delta table's small files (the many small commits of frequent syncs) into files of "
        "its `target_file_size`, keeping their key order, and write a snapshot manifest of each object-storage "
        "recipient's live rows; off: vacuum and checkpoints only.",
    )


class AuditConfig(StrictModel):
    """The transfer log in the provider's warehouse: the `incsync_audit` asset appends the tables `transfers`,
    `recipient_freshness` and `recipient_destinations` to one destination of the provider's."""

    destination: str = Field(
        description="Name of a destination of `destinations:` (any kind) that no recipient uses: the log names "
        "every recipient, so it must stay the provider's.",
    )
    frequency: str = Field(
        default="*/15 * * * *",
        description="Cron (UTC) of the `incsync_audit_schedule`; `incsync audit` runs the same once.",
    )
    lookback_seconds: int = Field(
        default=300, ge=0, le=86_400,
        description="Transfers that finished this long before the last one logged are read again (and upserted, "
        "never duplicated): a run whose end was stored late is still logged.",
    )


def audit_problems(cfg: object) -> list[str]:
    """What `incsync validate` says about `audit:` (``cfg`` is the whole file's IncsyncConfig)."""
    from incsync.config.base import listed_names
    from incsync.core.cron import is_valid_cron

    audit: AuditConfig | None = getattr(cfg, "audit", None)
    if audit is None:
        return []
    problems: list[str] = []
    names = [d.name for d in cfg.destinations]
    if audit.destination not in names:
        problems.append(f'audit.destination: "{audit.destination}" is not a configured destination; '
                        f"known: [{listed_names(names)}]")
    users = [r.id for r in cfg.recipients if r.destination == audit.destination]
    if users:
        problems.append(f'audit.destination: "{audit.destination}" is the destination of recipient(s) '
                        f"{', '.join(users[:5])}; the transfer log names every recipient, so give it a destination "
                        "of the provider's own that no recipient uses")
    if not is_valid_cron(audit.frequency):
        problems.append(f'audit.frequency: "{audit.frequency}" is not a cron expression (e.g. "*/15 * * * *")')
    return problems


class AutoWorkerConfig(StrictModel):
    """The worker `incsync transfer` starts on first use and hands its transfers to (docs/operations.md)."""

    auto_start: bool = Field(
        default=True,
        description="`incsync transfer` hands its transfer to a resident worker for this file, starting one "
        "(detached, its log under the per-user runtime folder) when none answers, so a cron's later calls skip the "
        "JVM and Dagster start. false: every call runs in its own process, as `--no-worker` or "
        "`INCSYNC_AUTO_WORKER=0` do for one call. A dry run and `--allow-mass-delete` always run in the calling process.",
    )
    idle_exit_seconds: float = Field(
        default=900, ge=1, le=7 * 86400,
        description="A worker `incsync transfer` started exits after this many seconds without a transfer, "
        "removing its socket; the next call starts another.",
    )
