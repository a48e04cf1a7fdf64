"""What a downstream asset receives for a model: each recipient's published copy, read on demand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incsync.config.model import ModelConfig, RecipientConfig
from incsync.destinations.base import Destination

if TYPE_CHECKING:  # the rows are read in the run that asks for them
    import pyarrow as pa


class PublishedCopies:
    """Each recipient's published copy of one model.

    ``location(r)`` says where a reader of the destination finds it; ``read(r)`` returns what the copy
    holds now (an append log reduced to each key's newest row) as an Arrow table.
    """

    def __init__(self, model: ModelConfig, copies: dict[str, tuple[RecipientConfig, Destination]]) -> None:
        self.model = model
        self._copies = copies

    @property
    def recipients(self) -> list[str]:
        return sorted(self._copies)

    def _copy(self, recipient_id: str) -> tuple[RecipientConfig, Destination]:
        try:
            return self._copies[recipient_id]
        except KeyError:
            raise KeyError(f"recipient {recipient_id!r} is not among this input's recipients {self.recipients}") from None

    def location(self, recipient_id: str) -> str:
        recipient, destination = self._copy(recipient_id)
        return destination.location(model=self.model, recipient=recipient).shown

    def read(self, recipient_id: str) -> pa.Table:
        recipient, destination = self._copy(recipient_id)
        return destination.current_rows(model=self.model, recipient=recipient)
