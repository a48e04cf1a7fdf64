"""core.windows, the one module that computes windows, agrees with the partitions Dagster shows."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
import pytest

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.core.bounds import UTC
from incsync.core.windows import (
    Window,
    grid_start,
    recipient_windows,
    scheduled_windows,
    window_at,
    window_of,
    windows_between,
)
from incsync.operations.partitions import window_partitions


def _model(start: int, seconds: int) -> ModelConfig:
    return ModelConfig(
        model_name="orders", source="app", source_table="orders", primary_key=["id"], last_modified_column="updated_at",
        organization_column="org", min_start_time_epoch=start, max_transfer_time_window_seconds=seconds,
    )


@pytest.mark.parametrize("start", [1735689600, 1735689600 + 1, 1735689600 + 3 * 3600 + 17])
@pytest.mark.parametrize("seconds", [86_400, 21_600, 3600, 900, 60])
def test_the_grid_is_dagsters_grid(start: int, seconds: int) -> None:
    model = _model(start, seconds)
    now = datetime.fromtimestamp(start, UTC) + timedelta(seconds=seconds * 5 + 7)
    with dg.partition_loading_context(effective_dt=now):
        keys = window_partitions(model).get_partition_keys()
    ours = windows_between(model, grid_start(model), now)
    assert [w.key for w in ours] == keys
    for w in ours:
        tw = window_partitions(model).time_window_for_partition_key(w.key)
        assert (w.start, w.end) == (tw.start.astimezone(UTC), tw.end.astimezone(UTC))
        assert window_of(model, w.key) == w


def test_a_window_by_its_key_and_by_an_instant() -> None:
    model = _model(1735689600, 21_600)
    w = window_of(model, "2025-03-01-06:00")
    assert w == Window(datetime(2025, 3, 1, 6, tzinfo=UTC), datetime(2025, 3, 1, 12, tzinfo=UTC), "2025-03-01-06:00")
    assert window_at(model, datetime(2025, 3, 1, 11, 59, 59, 999_999, tzinfo=UTC)) == w
    with pytest.raises(ValueError, match="not a window boundary"):
        window_of(model, "2025-03-01-07:00")


def test_a_recipients_windows_and_a_ticks_windows() -> None:
    model = _model(1735689600, 86_400)  # 2025-01-01
    late = RecipientConfig(id="acme", id_in_provider_system="1", destination="d",
                           default_full_refresh_min_start_time_epoch=1735689600 + 86_400 + 5)
    until = datetime(2025, 1, 4, 3, tzinfo=UTC)
    assert [w.key for w in recipient_windows(model, late, until=until)] == ["2025-01-02", "2025-01-03", "2025-01-04"]
    assert [w.key for w in scheduled_windows(model, now=until)] == ["2025-01-03", "2025-01-04"]
    assert [w.key for w in scheduled_windows(model, now=until, previous_tick=datetime(2025, 1, 4, 2, tzinfo=UTC))] == ["2025-01-04"]
    assert [w.key for w in scheduled_windows(model, now=datetime(2025, 1, 1, 5, tzinfo=UTC))] == ["2025-01-01"]
    assert scheduled_windows(model, now=datetime(2024, 12, 31, tzinfo=UTC)) == []
