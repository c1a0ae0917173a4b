"""ApiVersions (18): the versions of every API this broker speaks, and the features (KIP-584) it
supports and the cluster has finalized, with their epoch (``samsa.cluster.features``): clients
read them here (the Java Admin's describeFeatures, ``kafka-features describe``), and a
producer uses transactions version 2 (KIP-890 part 2) only when ``transaction.version`` is
finalized at 2; ``group.version`` 1 is the consumer group protocol (KIP-848), ``share.version``
1 share groups (KIP-932; Kafka 4.4 finalizes 2), ``streams.version`` 1 streams groups (KIP-1071)."""

from samsa.cluster.features import SUPPORTED
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import HANDLERS, handles


@handles(ApiKey.API_VERSIONS)
def api_versions(ctx, req: dict) -> dict:
    out = {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": h.min_version, "max_version": h.max_version}
                     for k, h in sorted(HANDLERS.items())],
        "throttle_time_ms": 0,
    }
    if ctx.version >= 3:
        features = ctx.broker.features
        # v3 and below leave out the features whose minimum is 0, as Kafka does (KAFKA-17011:
        # older clients refuse a minimum of 0)
        out["supported_features"] = [{"name": n, "min_version": lo, "max_version": hi}
                                     for n, (lo, hi) in sorted(SUPPORTED.items()) if ctx.version >= 4 or lo > 0]
        out["finalized_features_epoch"] = features.epoch
        out["finalized_features"] = [{"name": n, "min_version_level": level, "max_version_level": level}
                                     for n, level in sorted(features.levels.items()) if level > 0]
    return out
