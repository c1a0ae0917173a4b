"""The controller's rules for UpdateFeatures (``samsa.cluster.features``) and the finalized levels
in the local metadata store. The messages are Kafka 4.4.0's (tests/differential compares them
over the wire); the order of refusals is its controller's HashMap order."""

from __future__ import annotations

import pytest

from samsa.cluster.features import (DEFAULT_LEVELS, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE, FinalizedFeatures,
                                    apply_updates, initial_levels, java_hash_order)
from samsa.cluster.metadata import LocalMetadataStore
from samsa.protocol import errors

PREFIX = "The update failed for all features since the following feature had an error: "


def refused(updates, current=None) -> str:
    with pytest.raises(errors.InvalidUpdateVersionError) as e:
        apply_updates(dict(current or DEFAULT_LEVELS), updates, 1)
    assert e.value.args[0].startswith(PREFIX)
    return e.value.args[0][len(PREFIX):]


def test_defaults_are_the_highest_levels():
    assert DEFAULT_LEVELS == {"group.version": 1, "metadata.version": 33, "share.version": 1, "streams.version": 1,
                              "transaction.version": 2}


def test_downgrade_upgrade_and_disable():
    down = apply_updates(DEFAULT_LEVELS, [("transaction.version", 1, SAFE_DOWNGRADE)], 1)
    assert down["transaction.version"] == 1
    assert apply_updates(down, [("transaction.version", 2, UPGRADE)], 1)["transaction.version"] == 2
    assert apply_updates(down, [("transaction.version", 0, UNSAFE_DOWNGRADE)], 1)["transaction.version"] == 0
    assert apply_updates(DEFAULT_LEVELS, [("transaction.version", 2, UPGRADE)], 1) == DEFAULT_LEVELS  # no change
    # a later update of the same feature replaces an earlier one
    assert apply_updates(DEFAULT_LEVELS, [("transaction.version", 3, UPGRADE), ("transaction.version", 2, UPGRADE)],
                         1) == DEFAULT_LEVELS


def test_refusals_worded_as_kafka():
    assert refused([("transaction.version", 3, UPGRADE)]) == (
        "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2")
    assert refused([("foo.bar", 1, UPGRADE)]) == (
        "Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature.")
    assert refused([("foo.bar", 0, SAFE_DOWNGRADE)]) == "Invalid update version 0 for feature foo.bar. Feature foo.bar not found."
    assert refused([("transaction.version", 1, UPGRADE)]).endswith(
        "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
        "downgrade.")
    assert refused([("transaction.version", 2, SAFE_DOWNGRADE)], {"transaction.version": 1}).endswith(
        "Can't downgrade to a newer version.")
    assert refused([("transaction.version", 1, 0)]).endswith("The controller does not support the given upgrade type.")
    assert refused([("transaction.version", -1, SAFE_DOWNGRADE)]).endswith("A feature version cannot be less than 0.")
    assert refused([("metadata.version", 21, SAFE_DOWNGRADE)]) == (
        "Unsupported metadata.version downgrade from 33 to 21. Refusing to perform the requested downgrade because it "
        "might delete metadata information.")
    assert refused([("metadata.version", 21, UNSAFE_DOWNGRADE)]).endswith(
        "Unsafe metadata downgrade is not supported in this version.")
    assert refused([("metadata.version", 0, SAFE_DOWNGRADE)]).endswith("Local controller 1 only supports versions 7-33")
    # two refused: the first in Kafka's controller's (HashMap) order, whatever the request's
    for order in ([("transaction.version", 7, UPGRADE), ("foo.bar", 1, UPGRADE)],
                  [("foo.bar", 1, UPGRADE), ("transaction.version", 7, UPGRADE)]):
        assert refused(order).startswith("Invalid update version 1 for feature foo.bar.")


def test_java_hash_order():
    # String.hashCode spread over 16 buckets: group.version 0, foo.bar 3, kraft.version 5, transaction.version 10
    assert java_hash_order(["transaction.version", "foo.bar", "kraft.version", "group.version"]) == [
        "group.version", "foo.bar", "kraft.version", "transaction.version"]


def test_initial_levels_from_format_within_samsa_ranges():
    formatted = {"metadata.version": 30, "share.version": 2, "transaction.version": 0, "kraft.version": 1,
                 "eligible.leader.replicas.version": 1, "group.version": 1}
    assert initial_levels(formatted) == {"group.version": 1, "metadata.version": 30, "share.version": 1,
                                         "streams.version": 0, "transaction.version": 0}
    assert initial_levels(None) == DEFAULT_LEVELS


def test_local_store_keeps_levels_and_epoch(tmp_path):
    store = LocalMetadataStore(tmp_path)
    assert store.features() is None
    assert store.ensure_features(DEFAULT_LEVELS) == (DEFAULT_LEVELS, 0)
    assert store.ensure_features({"transaction.version": 1}) == (DEFAULT_LEVELS, 0)  # written once
    held = {**DEFAULT_LEVELS, "transaction.version": 1}
    assert store.put_features(held, 0) == 1
    assert store.put_features(DEFAULT_LEVELS, 0) is None  # not at epoch 0 any more
    assert LocalMetadataStore(tmp_path).features() == (held, 1)  # a restarted broker reads them back


def test_finalized_features_never_go_back_to_an_older_epoch():
    f = FinalizedFeatures()
    f.update({"transaction.version": 1}, 3)
    f.update({"transaction.version": 2}, 2)  # a late watch notification
    assert (f.level("transaction.version"), f.epoch) == (1, 3)


def test_kraft_controller_decides_update_features_into_feature_level_records():
    """The active KRaft controller's UpdateFeatures: the same rules against the image's levels,
    FeatureLevelRecords through Kafka's record format into the image (0 removes the feature)."""
    from samsa.cluster.kraft_controller import ControllerLogic
    from samsa.cluster.kraft_image import Changes, MetadataImage
    from samsa.protocol import metadata_records as mr

    image = MetadataImage()
    logic = ControllerLogic(image, "MkU3OEVBNTcwNTJENDM2Qg")
    offset = -1

    def decide(updates, validate_only=False) -> dict:
        nonlocal offset
        d = logic.update_features({"feature_updates": [
            {"feature": f, "max_version_level": level, "upgrade_type": kind} for f, level, kind in updates],
            "validate_only": validate_only}, 3000)
        for name, version, data in d.records:
            offset += 1
            n, _, decoded = mr.decode(mr.encode(name, version, data))
            image.apply(offset, n, decoded, Changes())
        return d.answer

    assert decide([("metadata.version", 33, UPGRADE), ("transaction.version", 2, UPGRADE)])["error_code"] == 0
    assert image.features == {"metadata.version": 33, "transaction.version": 2}
    assert decide([("transaction.version", 1, SAFE_DOWNGRADE)], validate_only=True)["error_code"] == 0
    assert image.features["transaction.version"] == 2
    refused = decide([("metadata.version", 30, SAFE_DOWNGRADE)])
    assert refused["error_code"] == errors.E_INVALID_UPDATE_VERSION
    assert refused["error_message"].endswith("Refusing to perform the requested downgrade because it might delete "
                                             "metadata information.")
    assert decide([("foo.bar", 1, UPGRADE)])["error_message"].endswith(
        "Local controller 3000 does not support this feature.")
    assert decide([("transaction.version", 0, SAFE_DOWNGRADE)])["error_code"] == 0
    assert image.features == {"metadata.version": 33}
