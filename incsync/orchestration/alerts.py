"""Alerts: a sensor that posts each failed transfer (model, recipients, windows, blamed party and reason, run
id and link) as JSON to a webhook whose URL an environment variable holds (the `alerts:` section).

Only what a listener needs to route the alert goes out: names, windows, the blamed party and its reason.
Never an error text, a DSN, a URL of the configuration or a tag's value: they may hold a secret.

Whose failures: every failed transfer of this configuration's models, whoever launched it, once. Dagster's
run-failure sensors only see runs whose origin is their own code location, and a run the CLI or the worker
executes in its own process (``runs.run_in_process``) has no origin at all, so they would drop it. Giving
those runs an origin would need the code location's name as the workspace spells it, which the CLI cannot
know. So this sensor reads the instance's run failures itself, after its cursor (the storage id of the last
failure it handled), and answers for a run when:

- a code location launched it (schedule, sensor, UI, backfill) and that location is this sensor's: the rule
  Dagster applies, so another code location's runs are left to that location's own sensor;
- no code location launched it (CLI, worker) and it is a transfer of one of this configuration's models (its
  asset selection, else its job's name): every incsync code location on the instance whose configuration
  has the model posts it, to its own webhook and through its own ``blamed`` filter.

The cursor moves past a failure once it is posted or left out, so a failure is posted once. A POST that
fails stops the tick there: the failures after the last one posted wait for the next tick (a failed first
POST fails the tick, which leaves the cursor where it was). A tick starts no POST past ``TICK_SECONDS``,
well inside the time Dagster gives a sensor, so its cursor is always saved with what it posted.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import dagster as dg

from incsync.config.alerts import AlertsConfig
from incsync.config.model import IncsyncConfig
from incsync.config.tags import RECIPIENT_TAG
from incsync.operations.blame import recipients_blamed, run_blame, run_level
from incsync.operations.partitions import model_asset_key
from incsync.orchestration.errors import AlertError

ALERT_SENSOR = "incsync_failure_alerts"
EVENT = "incsync.transfer_failed"
FAILURES_PER_TICK = 100
TICK_SECONDS = 30.0


def _failure_windows(instance: dg.DagsterInstance, run_id: str) -> dict[str, list[str]]:
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = event.dagster_event.step_failure_data if event.dagster_event else None
        metadata = data.user_failure_data.metadata if data and data.user_failure_data else {}
        if "windows" in metadata:
            return {str(k): list(v) for k, v in dict(metadata["windows"].value).items()}  # type: ignore[arg-type]  # a JSON metadata value: a mapping of recipient to windows
    return {}


def alert_payload(instance: dg.DagsterInstance, run: dg.DagsterRun, config: IncsyncConfig) -> dict[str, object] | None:
    """The JSON an alert posts for a failed run of a model, or None: not a model's run, or blamed on a party
    the `alerts.blamed` filter leaves out."""
    alerts = config.alerts or AlertsConfig()
    keys = {model_asset_key(m): m.model_name for m in config.models}
    if run.asset_selection:
        models = sorted({keys[k] for k in run.asset_selection if k in keys})
    else:  # a whole job launched from its page: the model's job is named after it (``assets.model_job``)
        models = [run.job_name] if run.job_name in keys.values() else []
    if not models:
        return None
    per = recipients_blamed(instance, run.run_id)
    windows = _failure_windows(instance, run.run_id)
    whole = run_blame(instance, run)
    if not per and whole is not None:  # failed before incsync classified each recipient: the run's own blame
        rids = sorted(windows) or ([run.tags[RECIPIENT_TAG]] if RECIPIENT_TAG in run.tags else [])
        per = {rid: whole for rid in rids}
    wanted = {rid: b for rid, b in per.items() if b.party.value in alerts.blamed}
    summary = run_level(wanted, recipients=len(per)) if per else whole
    if summary is None or summary.party.value not in alerts.blamed:
        return None
    return {
        "event": EVENT,
        "run_id": run.run_id,
        "run_url": f"{alerts.dagster_url.rstrip('/')}/runs/{run.run_id}",
        "job": run.job_name,
        "model": models[0],
        "models": models,
        "recipients": sorted(wanted),
        "windows": {rid: windows.get(rid, []) for rid in sorted(wanted)},
        "blamed": summary.party.value,
        "reason": summary.reason,
        "blamed_by_recipient": {rid: {"party": b.party.value, "reason": b.reason} for rid, b in sorted(wanted.items())},
    }


def post(url: str, payload: dict[str, object], *, timeout: float, env: str) -> int:
    """POST ``payload`` as JSON; the HTTP status. Errors name the variable, never the URL (it may hold a token)."""
    request = urllib.request.Request(  # noqa: S310 - the operator's webhook URL, http(s) by its nature
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "incsync-alerts"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the operator's URL
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise AlertError(f"the webhook in ${env} answered HTTP {exc.code}; check the URL and the receiving end") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AlertError(f"the webhook in ${env} could not be reached ({type(reason).__name__}); check the URL") from None


def answers_for(context: dg.SensorEvaluationContext, run: dg.DagsterRun) -> bool:
    """Whether this code location's sensor answers for ``run`` (see the module docstring): a run a code
    location launched only when it is this one, as Dagster's run-status sensors match it; a run no code
    location launched (the CLI's, the worker's) always, left to ``alert_payload`` to keep this config's."""
    origin = run.remote_job_origin
    if origin is None:
        return True
    here = context.code_location_origin
    return (origin.repository_origin.code_location_origin.location_name == (here.location_name if here else None)
            and origin.repository_origin.repository_name == context.repository_name)


def cursor_storage_id(cursor: str | None) -> int | None:
    """The storage id of the last failure handled, from the sensor's cursor: its own (the id) or the one the
    run-failure sensor of the same name kept (``RunStatusSensorCursor`` JSON). None: start afresh."""
    if cursor is None:
        return None
    try:
        value = json.loads(cursor)
        return int(value["record_id"] if isinstance(value, dict) else value)
    except (ValueError, KeyError, TypeError):
        return None


def _newest_failure(instance: dg.DagsterInstance) -> int:
    records = instance.fetch_run_status_changes(dg.DagsterEventType.RUN_FAILURE, limit=1).records
    return records[0].storage_id if records else -1


def build_alert_sensor(config_path: str, *, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING) -> dg.SensorDefinition:
    """The sensor of the `alerts:` section: each failed transfer, whoever launched it, posted once."""
    from incsync.operations.dagster_compat import run_reaction
    from incsync.orchestration.resources import cached_config

    @dg.sensor(
        name=ALERT_SENSOR, default_status=default_status, minimum_interval_seconds=30,
        description="Posts each failed transfer, whether the daemon, the UI, the CLI or a worker ran it, with whose "
        "it is to fix (provider, recipient or unknown), to the webhook the alerts section names.",
    )
    def incsync_failure_alerts(context: dg.SensorEvaluationContext):  # noqa: ANN202 - a sensor's generator
        after = cursor_storage_id(context.cursor)
        if after is None:  # first tick: failures from now on, as Dagster's run-failure sensors start
            after = _newest_failure(context.instance)
            context.update_cursor(str(after))
            yield dg.SkipReason(f"started: failed runs after event {after} are posted")
            return
        config = cached_config(config_path)
        alerts = config.alerts or AlertsConfig()
        records = context.instance.fetch_run_status_changes(
            dg.RunStatusChangeRecordsFilter(event_type=dg.DagsterEventType.RUN_FAILURE, after_storage_id=after),
            limit=FAILURES_PER_TICK, ascending=True,
        ).records
        ids = list({r.event_log_entry.run_id for r in records})
        runs = {run.run_id: run for run in context.instance.get_runs(dg.RunsFilter(run_ids=ids))} if ids else {}
        url = os.environ.get(alerts.webhook_url_env)
        started, posted, unposted = time.monotonic(), [], 0
        for record in records:
            run = runs.get(record.event_log_entry.run_id)
            payload = alert_payload(context.instance, run, config) if run and answers_for(context, run) else None
            if payload is not None and not url:
                unposted += 1
            elif payload is not None:
                if posted and time.monotonic() - started + alerts.timeout_seconds > TICK_SECONDS:
                    break  # the rest at the next tick
                try:
                    status = post(url, payload, timeout=alerts.timeout_seconds, env=alerts.webhook_url_env)
                except AlertError:
                    if not posted:
                        raise
                    break  # keep what was posted; this one is the next tick's first
                context.log.info("alert for run %s (%s) posted: HTTP %s", run.run_id, payload["blamed"], status)
                posted.append(run_reaction(run))
            context.update_cursor(str(record.storage_id))
        if posted:
            yield from posted
        elif unposted:
            yield dg.SkipReason(f"${alerts.webhook_url_env} is not set: export the webhook URL in it to post alerts "
                                f"({unposted} failed transfer(s) not posted)")
        else:
            yield dg.SkipReason(f"{len(records)} failed run(s) since the last tick, none a transfer of this "
                                f"configuration blamed on a party alerts.blamed ({', '.join(alerts.blamed)}) lists")

    return incsync_failure_alerts
