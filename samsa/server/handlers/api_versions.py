"""ApiVersions (18): the versions of every API this broker speaks, and the features (KIP-584)
it supports and has finalized, as Kafka 4 advertises them: ``transaction.version`` 2
(KIP-890 part 2) tells clients to use transactions version 2; ``group.version`` 1 the consumer
group protocol (KIP-848); ``share.version`` 1 share groups (KIP-932; Kafka 4.4 finalizes 2); ``streams.version`` 1
streams groups (KIP-1071)."""

from samsa.coordinator.transactions import TRANSACTION_VERSION
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import HANDLERS, handles

#: Features advertised from ApiVersions v3 (KIP-584): name -> (min, max supported, finalized level).
FEATURES = {
    "group.version": (0, 1, 1),
    "share.version": (0, 1, 1),
    "streams.version": (0, 1, 1),
    "transaction.version": (0, TRANSACTION_VERSION, TRANSACTION_VERSION),
}
FEATURES_EPOCH = 1


@handles(ApiKey.API_VERSIONS)
def api_versions(ctx, req: dict) -> dict:
    out = {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": h.min_version, "max_version": h.max_version}
                     for k, h in sorted(HANDLERS.items())],
        "throttle_time_ms": 0,
    }
    if ctx.version >= 3:
        out["supported_features"] = [{"name": n, "min_version": lo, "max_version": hi}
                                     for n, (lo, hi, _) in sorted(FEATURES.items())]
        out["finalized_features_epoch"] = FEATURES_EPOCH
        out["finalized_features"] = [{"name": n, "min_version_level": level, "max_version_level": level}
                                     for n, (_, _, level) in sorted(FEATURES.items())]
    return out
