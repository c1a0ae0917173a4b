"""ApiVersions (18): the versions of every API this broker speaks."""

from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import HANDLERS, handles


@handles(ApiKey.API_VERSIONS)
def api_versions(ctx, req: dict) -> dict:
    return {
        "error_code": 0,
        "api_keys": [{"api_key": k, "min_version": h.min_version, "max_version": h.max_version}
                     for k, h in sorted(HANDLERS.items())],
        "throttle_time_ms": 0,
    }
