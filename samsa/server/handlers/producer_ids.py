"""InitProducerId (22): producer ids and epochs for idempotent producers."""

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles

MAX_EPOCH = 32767


@handles(ApiKey.INIT_PRODUCER_ID)
def init_producer_id(ctx, req: dict) -> dict:
    if req["transactional_id"] is not None:
        return {"error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1,
                "producer_epoch": -1, "throttle_time_ms": 0}
    pid, epoch = req.get("producer_id", -1), req.get("producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1, "throttle_time_ms": 0}
    return {"error_code": 0, "producer_id": ctx.broker.admin.allocate_producer_id(), "producer_epoch": 0,
            "throttle_time_ms": 0}
