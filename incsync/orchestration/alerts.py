"""Alerts: a run-failure sensor that posts each failed transfer (model, recipients, windows, blamed party and
reason, run id and link) as JSON to a webhook whose URL an environment variable holds (the `alerts:` section).

Only what a listener needs to route the alert goes out: names, windows, the blamed party and its reason.
Never an error text, a DSN, a URL of the configuration or a tag's value: they may hold a secret.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import dagster as dg

from incsync.config.alerts import AlertsConfig
from incsync.config.model import IncsyncConfig
from incsync.config.tags import RECIPIENT_TAG
from incsync.orchestration.errors import AlertError
from incsync.orchestration.blame import recipients_blamed, run_blame, run_level

ALERT_SENSOR = "incsync_failure_alerts"
EVENT = "incsync.transfer_failed"


def _failure_windows(instance: dg.DagsterInstance, run_id: str) -> dict[str, list[str]]:
    for event in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = event.dagster_event.step_failure_data if event.dagster_event else None
        metadata = data.user_failure_data.metadata if data and data.user_failure_data else {}
        if "windows" in metadata:
            return {str(k): list(v) for k, v in dict(metadata["windows"].value).items()}  # type: ignore[arg-type]
    return {}


def alert_payload(instance: dg.DagsterInstance, run: dg.DagsterRun, config: IncsyncConfig) -> dict[str, object] | None:
    """The JSON an alert posts for a failed run of a model, or None: not a model's run, or blamed on a party
    the `alerts.blamed` filter leaves out."""
    from incsync.orchestration.assets import model_asset_key

    alerts = config.alerts or AlertsConfig()
    keys = {model_asset_key(m): m.model_name for m in config.models}
    models = sorted({keys[k] for k in run.asset_selection or () if k in keys})
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
    request = urllib.request.Request(
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


def build_alert_sensor(config_path: str, *, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING) -> dg.SensorDefinition:
    """The run-failure sensor of the `alerts:` section (Dagster calls it once per failed run of this code location)."""
    from incsync.orchestration.resources import cached_config

    @dg.run_failure_sensor(
        name=ALERT_SENSOR, default_status=default_status, minimum_interval_seconds=30,
        description="Posts each failed transfer, with whose it is to fix (provider, recipient or unknown), to the "
        "webhook the alerts section names.",
    )
    def incsync_failure_alerts(context: dg.RunFailureSensorContext) -> dg.SkipReason | None:
        config = cached_config(config_path)
        alerts = config.alerts or AlertsConfig()
        payload = alert_payload(context.instance, context.dagster_run, config)
        if payload is None:
            return dg.SkipReason(f"run {context.dagster_run.run_id}: not a transfer, or blamed on a party "
                                 f"alerts.blamed ({', '.join(alerts.blamed)}) leaves out")
        url = os.environ.get(alerts.webhook_url_env)
        if not url:
            return dg.SkipReason(f"${alerts.webhook_url_env} is not set: export the webhook URL in it to post alerts")
        status = post(url, payload, timeout=alerts.timeout_seconds, env=alerts.webhook_url_env)
        context.log.info("alert for run %s (%s) posted: HTTP %s", payload["run_id"], payload["blamed"], status)
        return None

    return incsync_failure_alerts
