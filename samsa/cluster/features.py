"""Feature versioning (KIP-584): the features this broker supports, the levels the cluster has
finalized, and the controller's rules for changing them (UpdateFeatures, ``kafka-features``).

Pure logic: the finalized levels and their epoch live in the metadata store (a local broker's
file, a ZooKeeper cluster's ``/feature`` znode as Kafka's ZooKeeper mode kept it); the broker
keeps the last ones it read in a :class:`FinalizedFeatures` and ApiVersions reports them.

What a finalized level changes: ``transaction.version`` is read by clients from ApiVersions (a
Java or Samsa producer uses transactions version 2 only when it is finalized at 2); the broker
serves each request by its API version, as Kafka 4.4 does (an EndTxn v5 is a transactions
version 2 client whatever level is finalized). ``metadata.version`` is reported and can be
raised, never lowered, as Kafka refuses it.
"""

from __future__ import annotations

from samsa.protocol import errors
from samsa.storage.kraft import FIRST_LEVEL, METADATA_VERSIONS

METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
LATEST_METADATA_LEVEL = FIRST_LEVEL + len(METADATA_VERSIONS) - 1

#: The features Samsa supports: name -> (min, max) level. ``eligible.leader.replicas.version``
#: and ``kraft.version`` are not among them (no ELR; KRaft's own feature is its quorum's), and
#: ``share.version`` stops at 1 (Kafka 4.4: 2, the share groups' dead-letter queue).
SUPPORTED: dict[str, tuple[int, int]] = {
    "group.version": (0, 1),
    METADATA_VERSION: (FIRST_LEVEL, LATEST_METADATA_LEVEL),
    "share.version": (0, 1),
    "streams.version": (0, 1),
    TRANSACTION_VERSION: (0, 2),
}
#: The levels a cluster starts with (a ZooKeeper cluster, a broker without ``process.roles``):
#: the highest of each, as Kafka 4.4's ``kafka-storage format`` finalizes them.
DEFAULT_LEVELS: dict[str, int] = {name: hi for name, (_, hi) in SUPPORTED.items()}

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
ALL_FAILED = "The update failed for all features since the following feature had an error: "


class FinalizedFeatures:
    """The cluster's finalized levels as this broker last read them (0: not finalized), and the
    epoch of that reading (-1: none read yet). Updated from ZooKeeper's thread (or by this
    broker's own writes), read on the event loop: one tuple, replaced whole, and never by an
    older epoch. A KRaft broker follows its metadata image instead (:meth:`follow`)."""

    def __init__(self) -> None:
        self._state: tuple[dict[str, int], int] = ({}, -1)
        self._source = None

    def follow(self, source) -> None:
        """Read the levels from ``source()`` at each use (a KRaft broker's metadata image)."""
        self._source = source

    @property
    def _current(self) -> tuple[dict[str, int], int]:
        return self._state if self._source is None else self._source()

    @property
    def levels(self) -> dict[str, int]:
        return self._current[0]

    @property
    def epoch(self) -> int:
        return self._current[1]

    def level(self, name: str) -> int:
        return self._current[0].get(name, 0)

    def update(self, levels: dict[str, int], epoch: int) -> None:
        if epoch >= self._state[1]:
            self._state = (dict(levels), epoch)


def initial_levels(formatted: dict[str, int] | None) -> dict[str, int]:
    """The levels a new cluster finalizes: those ``storage format`` wrote (a KRaft node) for the
    features Samsa supports, within its range, else :data:`DEFAULT_LEVELS`."""
    if formatted is None:
        return dict(DEFAULT_LEVELS)
    out = {}
    for name, (lo, hi) in SUPPORTED.items():
        level = formatted.get(name, 0)
        out[name] = min(max(level, lo), hi) if name == METADATA_VERSION or level else 0
    return out


class UpdateRefused(Exception):
    """One feature's update refused: INVALID_UPDATE_VERSION with Kafka's message for it."""

    def __init__(self, feature: str, level: int, reason: str):
        super().__init__(f"Invalid update version {level} for feature {feature}. {reason}")


class MetadataDowngradeRefused(UpdateRefused):
    def __init__(self, current: int, level: int, unsafe: bool):
        Exception.__init__(self, f"Unsupported metadata.version downgrade from {current} to {level}. " + (
            "Unsafe metadata downgrade is not supported in this version." if unsafe else
            "Refusing to perform the requested downgrade because it might delete metadata information."))


def _check(name: str, level: int, upgrade_type: int, current: dict[str, int], controller_id: int) -> None:
    """Kafka 4.4's controller's rules for one feature update, in its order."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise UpdateRefused(name, level, "The controller does not support the given upgrade type.")
    if level < 0:
        raise UpdateRefused(name, level, "A feature version cannot be less than 0.")
    if name not in SUPPORTED:
        if level == 0:
            raise UpdateRefused(name, level, f"Feature {name} not found.")
        raise UpdateRefused(name, level, f"Local controller {controller_id} does not support this feature.")
    lo, hi = SUPPORTED[name]
    if not (lo <= level <= hi) and not (level == 0 and name != METADATA_VERSION):
        raise UpdateRefused(name, level, f"Local controller {controller_id} only supports versions {lo}-{hi}")
    now = current.get(name, 0)
    if level > now and upgrade_type != UPGRADE:
        raise UpdateRefused(name, level, "Can't downgrade to a newer version.")
    if level < now and upgrade_type == UPGRADE:
        raise UpdateRefused(name, level, "Can't downgrade the version of this feature without setting the upgrade "
                                         "type to either safe or unsafe downgrade.")
    if name == METADATA_VERSION and level < now:
        raise MetadataDowngradeRefused(now, level, upgrade_type == UNSAFE_DOWNGRADE)


def apply_updates(current: dict[str, int], updates: list[tuple[str, int, int]], controller_id: int) -> dict[str, int]:
    """The finalized levels after ``updates`` ((feature, level, upgrade type), a later update of a
    feature replacing an earlier one, as Kafka takes them); KafkaError INVALID_UPDATE_VERSION
    with Kafka's message if any is refused (then none applies)."""
    wanted: dict[str, tuple[int, int]] = {}
    for name, level, upgrade_type in updates:
        wanted[name] = (level, upgrade_type)
    out = dict(current)
    for name in java_hash_order(list(wanted)):  # the first refusal in the order Kafka's controller checks them
        level, upgrade_type = wanted[name]
        try:
            _check(name, level, upgrade_type, current, controller_id)
        except UpdateRefused as e:
            raise errors.InvalidUpdateVersionError(ALL_FAILED + str(e)) from None
        out[name] = level
    return out


def java_hash_order(names: list[str]) -> list[str]:
    """``names`` in the order a Java HashMap of them iterates (Kafka's controller keeps the
    updates in one): by bucket (String.hashCode, spread, over the table's power-of-two size),
    then in insertion order."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = 0
        for unit in name.encode("utf-16-be").hex(" ", 2).split():
            h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)
    return [n for _, _, n in sorted((bucket(n), i, n) for i, n in enumerate(names))]
