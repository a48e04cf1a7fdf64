"""Transfer ids: when a transfer started, plus a random part (``20261126T084350Z-0123456789ab``)."""

from __future__ import annotations

import time
import uuid

TRANSFER_ID_PATTERN = r"\d{8}T\d{6}Z-[0-9a-f]{12}"


def new_transfer_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"
