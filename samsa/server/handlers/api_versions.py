"""ApiVersions (18): the versions of every API this broker speaks, and the features (KIP-584)
it supports and has finalized, as Kafka 4 advertises them: ``transaction.version`` 2
(KIP-890 part 2) tells clients to use transactions version 2."""

from samsa.coordinator.transactions import TRANSACTION_VERSION
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import HANDLERS, handles

# (name, lowest supported, highest supported, finalized level)
FEATURES = [("transaction.version", 0, TRANSACTION_VERSION, TRANSACTION_VERSION)]
FINALIZED_FEATURES_EPOCH = 0


@handles(ApiKey.API_VERSIONS)
def api_versions(ctx, req: dict) -> dict:
    return {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": h.min_version, "max_version": h.max_version}
                     for k, h in sorted(HANDLERS.items())],
        "throttle_time_ms": 0,
        "supported_features": [{"name": n, "min_version": lo, "max_version": hi} for n, lo, hi, _ in FEATURES],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": n, "min_version_level": level, "max_version_level": level}
                               for n, _, _, level in FEATURES],
    }
