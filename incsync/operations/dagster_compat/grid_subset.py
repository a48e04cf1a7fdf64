"""A subset of a model's (window × recipient) partitions as, per window, a bit mask over the recipients: what
Dagster holds as a set of partition key strings (``DefaultPartitionsSubset``, the only subset its
``MultiPartitionsDefinition`` has), 3.95 M strings for 10,000 recipients × 395 windows, serialized as one JSON
list in the asset's cached status and parsed again by every page that shows the asset's partitions.

It answers what the asset page asks of a subset (its size, union, difference, intersection, membership) in
time that grows with the windows, not the partitions, and anything else (its keys, their ranges, its serialized
form) as Dagster's own subset of the same keys would. Private Dagster API (``PartitionsSubset``'s abstract
methods), pinned by ``incsync_tests/operations/test_partition_status.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dagster._core.definitions.partitions.definition import (
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    PartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionsDefinition,
)
from dagster._core.definitions.partitions.partition_key_range import PartitionKeyRange
from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset, PartitionsSubset
from dagster._core.definitions.partitions.utils.multi import MULTIPARTITION_KEY_DELIMITER


def is_grid(partitions_def: PartitionsDefinition | None) -> bool:
    """Whether ``partitions_def`` is a model's shape: time windows (the primary dimension) × a named dynamic or
    a static dimension (``operations.partitions.model_partitions``)."""
    if not isinstance(partitions_def, MultiPartitionsDefinition) or len(partitions_def.partitions_defs) != 2:
        return False
    primary, secondary = partitions_def.primary_dimension.partitions_def, partitions_def.secondary_dimension.partitions_def
    return isinstance(primary, TimeWindowPartitionsDefinition) and (
        isinstance(secondary, StaticPartitionsDefinition)
        or (isinstance(secondary, DynamicPartitionsDefinition) and secondary.name is not None))


class Index:
    """The secondary dimension's keys (recipients) in the order their bits were given; only ever appended to,
    so a bit keeps its key for every subset that shares the index."""

    __slots__ = ("keys", "position")

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self.keys: list[str] = []
        self.position: dict[str, int] = {}
        for key in keys:
            self.bit(key)

    def bit(self, key: str) -> int:
        at = self.position.get(key)
        if at is None:
            at = self.position[key] = len(self.keys)
            self.keys.append(key)
        return 1 << at

    def keys_of(self, mask: int) -> list[str]:
        """The keys whose bits ``mask`` sets, in index order."""
        bits = bin(mask)[:1:-1]  # bit 0 first
        return [self.keys[i] for i, bit in enumerate(bits) if bit == "1"]


class GridSubset(PartitionsSubset[str]):
    """Partitions of a grid-shaped ``MultiPartitionsDefinition`` (``is_grid``): primary key (window) -> bit mask
    over ``index`` (recipients). Masks are never zero; subsets combined with one another share one index."""

    def __init__(self, partitions_def: MultiPartitionsDefinition, index: Index, masks: dict[str, int] | None = None) -> None:
        self.partitions_def, self.index = partitions_def, index
        self.masks: dict[str, int] = {k: m for k, m in (masks or {}).items() if m}
        names = [d.name for d in partitions_def.partitions_defs]  # the order of a key string's parts
        self._primary_first = names[0] == partitions_def.primary_dimension.name

    # -- keys ------------------------------------------------------------------------------------------------
    def key(self, primary: str, secondary: str) -> str:
        from dagster._core.definitions.partitions.utils import MultiPartitionKey

        dims = {self.partitions_def.primary_dimension.name: primary, self.partitions_def.secondary_dimension.name: secondary}
        return MultiPartitionKey(dims)

    def split(self, key: str) -> tuple[str, str] | None:
        """(primary, secondary) of a key string (Dagster's own format: each dimension's key in the definition's
        order, joined by its delimiter), None when it is not one."""
        parts = key.split(MULTIPARTITION_KEY_DELIMITER)
        if len(parts) != 2:
            return None
        return (parts[0], parts[1]) if self._primary_first else (parts[1], parts[0])

    def _like(self, masks: dict[str, int]) -> GridSubset:
        return GridSubset(self.partitions_def, self.index, masks)

    def _shares_index(self, other: Any) -> bool:
        return isinstance(other, GridSubset) and other.index is self.index

    # -- what the asset page asks ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return sum(m.bit_count() for m in self.masks.values())

    def __contains__(self, value: object) -> bool:
        parts = self.split(str(value))
        if parts is None or parts[1] not in self.index.position:
            return False
        return bool(self.masks.get(parts[0], 0) >> self.index.position[parts[1]] & 1)

    def __or__(self, other: PartitionsSubset) -> PartitionsSubset:
        if not self._shares_index(other):
            return super().__or__(other)
        assert isinstance(other, GridSubset)
        masks = dict(self.masks)
        for k, m in other.masks.items():
            masks[k] = masks.get(k, 0) | m
        return self._like(masks)

    def __sub__(self, other: PartitionsSubset) -> PartitionsSubset:
        if not self._shares_index(other):
            return super().__sub__(other)
        assert isinstance(other, GridSubset)
        return self._like({k: m & ~other.masks.get(k, 0) for k, m in self.masks.items()})

    def __and__(self, other: PartitionsSubset) -> PartitionsSubset:
        if not self._shares_index(other):
            return super().__and__(other)
        assert isinstance(other, GridSubset)
        return self._like({k: m & other.masks.get(k, 0) for k, m in self.masks.items()})

    def __eq__(self, other: object) -> bool:
        if self._shares_index(other):
            assert isinstance(other, GridSubset)
            return self.masks == other.masks
        return isinstance(other, PartitionsSubset) and set(self.get_partition_keys()) == set(other.get_partition_keys())

    __hash__ = None  # type: ignore[assignment]  # as Dagster's own subsets

    def __repr__(self) -> str:
        return f"GridSubset({len(self)} partitions over {len(self.masks)} windows)"

    # -- anything else, as Dagster's subset of the same keys -----------------------------------------------------
    def get_partition_keys(self) -> Iterator[str]:
        for primary, mask in self.masks.items():
            for secondary in self.index.keys_of(mask):
                yield self.key(primary, secondary)

    def secondary_keys(self, primary: str) -> list[str]:
        return self.index.keys_of(self.masks.get(primary, 0))

    def with_partition_keys(self, partition_keys: Iterable[str]) -> GridSubset:
        return self.with_valid_keys(partition_keys)

    def with_valid_keys(self, partition_keys: Iterable[str], primary: set[str] | None = None,
                        secondary: set[str] | None = None) -> GridSubset:
        """``with_partition_keys`` of the keys whose primary key is in ``primary`` and secondary in ``secondary``
        (None: any). Each window's new bits are set in a byte array first: OR-ing one bit at a time into a mask
        of 10,000 recipients would copy the mask for every key."""
        index, position = self.index, self.index.position
        first = 0 if self._primary_first else 1
        positions: dict[str, list[int]] = {}
        for key in partition_keys:
            parts = key.split(MULTIPARTITION_KEY_DELIMITER)
            if len(parts) != 2:
                continue
            window, recipient = parts[first], parts[1 - first]
            if (primary is not None and window not in primary) or (secondary is not None and recipient not in secondary):
                continue
            at = position.get(recipient)
            if at is None:
                at = index.bit(recipient).bit_length() - 1
            positions.setdefault(window, []).append(at)
        masks = dict(self.masks)
        size = (len(index.keys) + 7) // 8
        for primary, ats in positions.items():
            bits = bytearray(size)
            for at in ats:
                bits[at >> 3] |= 1 << (at & 7)
            masks[primary] = masks.get(primary, 0) | int.from_bytes(bits, "little")
        return self._like(masks)

    def get_partition_keys_not_in_subset(self, partitions_def: PartitionsDefinition) -> Iterable[str]:
        return [key for key in partitions_def.get_partition_keys() if key not in self]

    def get_partition_key_ranges(self, partitions_def: PartitionsDefinition) -> Sequence[PartitionKeyRange]:
        return self.to_serializable_subset().get_partition_key_ranges(partitions_def)

    def to_serializable_subset(self) -> PartitionsSubset:
        return DefaultPartitionsSubset(set(self.get_partition_keys()))

    def serialize(self) -> str:
        return self.to_serializable_subset().serialize()

    @classmethod
    def from_serialized(cls, partitions_def: PartitionsDefinition, serialized: str) -> PartitionsSubset:
        return DefaultPartitionsSubset.from_serialized(partitions_def, serialized)

    @classmethod
    def can_deserialize(cls, partitions_def: PartitionsDefinition, serialized: str, serialized_partitions_def_unique_id: str | None,
                        serialized_partitions_def_class_name: str | None) -> bool:
        return DefaultPartitionsSubset.can_deserialize(partitions_def, serialized, serialized_partitions_def_unique_id,
                                                       serialized_partitions_def_class_name)

    def empty_subset(self) -> GridSubset:
        return self._like({})

    @classmethod
    def create_empty_subset(cls, partitions_def: PartitionsDefinition | None = None) -> PartitionsSubset:
        if isinstance(partitions_def, MultiPartitionsDefinition) and is_grid(partitions_def):
            return cls(partitions_def, Index())
        return DefaultPartitionsSubset()
