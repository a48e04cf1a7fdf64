"""A run's materializations stored at the cost of a row each: the event Dagster would store, serialized
from a template, inserted as one batch. Private Dagster API, pinned by
``incsync_tests/operations/test_dagster_compat.py``.

Dagster's way (``DagsterEvent.asset_materialization``) sends each event through the step's log manager
and serializes it with ``serdes`` when the storage inserts it, most of the cost in ``serialize_value``
walking the same tree for every window; a backfill of many recipients over years stores one per
(window, recipient), so that walk alone would occupy a core for a long time. Within a step, a model's materializations
differ only in their partition, their timestamp and their metadata values: the event is serialized
once per shape (the metadata's labels and kinds) with a unique placeholder for each of those values,
and each window's JSON is the template with its values filled in by ``json.dumps`` — the same text
``serialize_value`` writes, which the first event of each shape checks in every process (a
difference sends that shape back to ``serialize_value``, with a warning).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from incsync.operations.dagster_compat.compact import compact

_LOG = logging.getLogger(__name__)
_encode_string = json.encoder.encode_basestring_ascii  # what json.dumps uses with its default ensure_ascii

# The metadata kinds whose serialized form is one field beside the kind's name; anything else (a
# table schema, JSON, a URL) is serialized by serdes.
_ONE_FIELD = {
    dg.IntMetadataValue: "value", dg.FloatMetadataValue: "value", dg.TimestampMetadataValue: "value",
    dg.TextMetadataValue: "text", dg.PathMetadataValue: "path", dg.UrlMetadataValue: "url",
}
_PLACEHOLDER = re.compile(r'"@@incsync-slot-(\d+)@@"|77777777777(\d{6})\b|7\.777777(\d{6})1e\+250')


def _placeholder(kind: type, slot: int) -> Any:
    """A value of ``kind``'s field that serializes to a text found nowhere else in the event."""
    if kind is dg.IntMetadataValue:
        return 77777777777_000000 + slot
    if kind in (dg.FloatMetadataValue, dg.TimestampMetadataValue):
        return float(f"7.777777{slot:06d}1e+250")
    return f"@@incsync-slot-{slot}@@"


class MaterializationRows:
    """The ``event_logs`` rows of one step's materializations of one asset (``dagster_compat.report_materialized``)."""

    def __init__(self, step: Any, asset_key: dg.AssetKey, *, clock: Callable[[], float] = time.time,
                 compact_text: bool = False) -> None:
        self._step, self._asset_key, self._clock = step, asset_key, clock
        self._compact = compact_text  # the storage stores compact text (``compact``)
        self._asset_key_text = asset_key.to_string()
        self._templates: dict[tuple[tuple[str, type], ...], tuple[list[str], list[int]] | None] = {}
        self._warned = False

    def entry(self, materialization: dg.AssetMaterialization, timestamp: float) -> Any:
        """The ``EventLogEntry`` Dagster's log manager builds for ``materialization`` in this step."""
        from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
        from dagster._core.events.log import EventLogEntry

        step = self._step
        label = materialization.label
        message = materialization.description or (f"Materialized value {label}." if label else "Materialized value.")
        event = DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name=step.job_name,
            step_handle=step.step.handle, node_handle=step.step.node_handle, step_kind_value=step.step.kind.value,
            logging_tags=step.event_tags, event_specific_data=StepMaterializationData(materialization),
            message=message, pid=os.getpid(),
        )
        return EventLogEntry(user_message=message, level=logging.DEBUG, job_name=step.job_name, run_id=step.run_id,
                             error_info=None, timestamp=timestamp, step_key=step.step.key, dagster_event=event)

    def rows(self, materializations: Sequence[dg.AssetMaterialization]) -> tuple[list[dict[str, Any]], Any]:
        """The rows to insert, in order, and the last one's ``EventLogEntry`` (the asset's row is
        updated from it, as Dagster does for a batch)."""
        rows, timestamp = [], self._clock()
        inserted_at = datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None)
        for m in materializations:
            text = self._serialized(m, timestamp)
            rows.append({
                "run_id": self._step.run_id, "event": compact(text) if self._compact else text,
                "dagster_event_type": "ASSET_MATERIALIZATION", "timestamp": inserted_at,
                "step_key": self._step.step.key, "asset_key": self._asset_key_text, "partition": m.partition,
            })
        return rows, self.entry(materializations[-1], timestamp) if materializations else None

    def _serialized(self, m: dg.AssetMaterialization, timestamp: float) -> str:
        from dagster._serdes import serialize_value

        shape = _shape(m)
        if shape is None:
            return serialize_value(self.entry(m, timestamp))
        if shape not in self._templates:
            self._templates[shape] = self._template(m, shape, timestamp)
        template = self._templates[shape]
        if template is None:
            return serialize_value(self.entry(m, timestamp))
        return _fill(template, m, timestamp)

    def _template(self, m: dg.AssetMaterialization, shape: tuple[tuple[str, type], ...], timestamp: float
                  ) -> tuple[list[str], list[int]] | None:
        """The event serialized with a placeholder per value, split around them; checked against
        ``serialize_value`` on ``m`` (None: this shape is serialized by serdes)."""
        from dagster._serdes import serialize_value

        metadata, slot = {}, 2
        for label, kind in shape:
            if kind in _ONE_FIELD:
                metadata[label] = kind(_placeholder(kind, slot))
                slot += 1
            else:
                metadata[label] = dg.MetadataValue.null()
        probe = dg.AssetMaterialization(asset_key=self._asset_key, partition=_placeholder(str, 0), metadata=metadata)
        text = serialize_value(self.entry(probe, _placeholder(dg.FloatMetadataValue, 1)))
        pieces, slots, at = [], [], 0
        for match in _PLACEHOLDER.finditer(text):
            pieces.append(text[at:match.start()])
            slots.append(int(next(g for g in match.groups() if g is not None)))
            at = match.end()
        pieces.append(text[at:])
        template = (pieces, slots)
        if sorted(slots) != list(range(slot)) or _fill(template, m, timestamp) != serialize_value(self.entry(m, timestamp)):
            if not self._warned:
                _LOG.warning("incsync: materializations of %s are serialized by Dagster's serdes (their template "
                             "did not reproduce its text); the run is slower, not different", self._asset_key.to_user_string())
                self._warned = True
            return None
        return template


def _fill(template: tuple[list[str], list[int]], m: dg.AssetMaterialization, timestamp: float) -> str:
    """``m``'s event: the template's text with ``m``'s values in their places."""
    pieces, slots = template
    values = [m.partition, timestamp] + [getattr(v, _ONE_FIELD[type(v)]) for v in m.metadata.values() if type(v) in _ONE_FIELD]
    out = [pieces[0]]
    for slot, piece in zip(slots, pieces[1:], strict=True):
        out.append(_json(values[slot]))
        out.append(piece)
    return "".join(out)


def _json(value: Any) -> str:
    """``json.dumps(value)``, without its per-call setup for the common kinds."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)


def _shape(m: dg.AssetMaterialization) -> tuple[tuple[str, type], ...] | None:
    """The labels and kinds of ``m``'s metadata, when a template can serialize it (None: serdes)."""
    if m.tags or m.description or not isinstance(m.partition, str):
        return None
    shape = []
    for label, value in m.metadata.items():
        kind = type(value)
        if kind not in _ONE_FIELD and kind is not dg.NullMetadataValue:
            return None
        shape.append((label, kind))
    return tuple(shape)
