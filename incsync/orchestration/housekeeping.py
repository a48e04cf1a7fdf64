"""incsync's own jobs beside the models': destination maintenance (an op, its job and schedule) and the
transfer log (the `incsync_audit` asset, its job and schedule). Each runs a pass of ``operations``
(``maintenance.maintain_destinations``, ``audit.run_audit``) that `incsync maintain` and `incsync audit`
run too.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config class and the asset's context
# type from their annotations.
import dagster as dg

from incsync.config.jobs import AUDIT_GROUP
from incsync.config.model import IncsyncConfig
from incsync.staging.folders import default_staging_dir

MAINTENANCE_JOB = "incsync_maintenance"
MAINTENANCE_SCHEDULE = "incsync_maintenance_schedule"
AUDIT_KEY = dg.AssetKey(["incsync_audit"])
AUDIT_JOB = "incsync_audit"
AUDIT_OP = "append_transfer_log"
AUDIT_SCHEDULE = "incsync_audit_schedule"


class MaintenanceRun(dg.Config):
    """What one run of the job maintains (the schedule's runs: everything)."""

    dry_run: bool = False
    destination: str | None = None
    model: str | None = None


@dg.op(name="maintain_destinations", description="Compaction, vacuum and checkpoints of the destinations.",
       required_resource_keys={"incsync"})
def maintain_op(context: dg.OpExecutionContext, config: MaintenanceRun) -> dg.Output[None]:
    # Imported in the run: every destination kind's code, which a code server never needs
    from incsync.operations.maintenance import maintain_destinations
    from incsync.operations.maintenance import summary as maintenance_summary

    done = []
    for result in maintain_destinations(context.resources.incsync.config, instance=context.instance,
                                        dry_run=config.dry_run, destination=config.destination, model=config.model,
                                        notify=context.log.warning):
        context.log.info(result.line())
        done.append(result)
    return dg.Output(None, metadata=maintenance_summary(done))


@dg.job(name=MAINTENANCE_JOB, description="Keeps each destination's storage within its live data plus the retention "
        "(docs/maintenance.md).")
def maintenance_job() -> None:
    maintain_op()


def build_maintenance_schedule(config: IncsyncConfig, *, default_status: dg.DefaultScheduleStatus) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(name=MAINTENANCE_SCHEDULE, job=maintenance_job, cron_schedule=config.maintenance.frequency,
                                 default_status=default_status)


# The op has its own name: Dagster names an asset's op after its key, and ops and jobs share one namespace in a
# code location, so an op `incsync_audit` beside the job `incsync_audit` stops the whole location from loading.
@dg.multi_asset(name=AUDIT_OP, specs=[dg.AssetSpec(
    AUDIT_KEY, group_name=AUDIT_GROUP, description="The transfer log in the provider's warehouse: transfers, "
    "recipient_freshness and recipient_destinations (docs/operations.md).")], required_resource_keys={"incsync"})
def audit_asset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    from incsync.operations.audit import run_audit  # in the run: the log's tables are pyarrow's
    from incsync.operations.audit import summary as audit_summary

    config = context.resources.incsync.config
    done = run_audit(config, context.instance, staging_dir=default_staging_dir(config))
    for appended in done:
        context.log.info(appended.line())
    return dg.MaterializeResult(metadata=audit_summary(done))


audit_job = dg.define_asset_job(AUDIT_JOB, selection=[AUDIT_KEY],
                                description="Appends the transfer log to the `audit:` destination.")


def build_audit_schedule(config: IncsyncConfig, *, default_status: dg.DefaultScheduleStatus) -> dg.ScheduleDefinition:
    assert config.audit is not None
    return dg.ScheduleDefinition(name=AUDIT_SCHEDULE, job=audit_job, cron_schedule=config.audit.frequency,
                                 default_status=default_status)
