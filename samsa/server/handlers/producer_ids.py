"""InitProducerId (22): producer ids and epochs, for idempotent and transactional producers.

Without a transactional id the broker hands out a fresh id (or, KIP-360, bumps the epoch of
the id the producer has); with one, the transaction coordinator answers (fencing the id's
older producer). Versions before 4 get INVALID_PRODUCER_EPOCH where newer ones get
PRODUCER_FENCED (KIP-588).
"""

from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import CLUSTER_NAME, RT, Op, allowed, allowed_by_type, quietly_allowed
from samsa.server.handlers.transactions import fenced_as

MAX_EPOCH = 32767


@handles(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(ctx, req: dict) -> dict:
    pid, epoch = req.get("producer_id", -1), req.get("producer_epoch", -1)
    txn_id = req["transactional_id"]
    if ctx.broker.authorizer is not None:
        if txn_id is not None and not allowed(ctx, Op.WRITE, RT.TRANSACTIONAL_ID, txn_id):
            return {"error_code": errors.E_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1, "throttle_time_ms": 0}
        if txn_id is None and not (quietly_allowed(ctx, Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME)
                                   or allowed_by_type(ctx, Op.WRITE, RT.TOPIC)):
            return {"error_code": errors.E_CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1, "throttle_time_ms": 0}
    if txn_id is not None:
        try:
            pid, epoch = await ctx.broker.txn.init_producer_id(txn_id, req["transaction_timeout_ms"], pid, epoch)
        except errors.KafkaError as e:
            return {"error_code": fenced_as(e.code, ctx.version, 4), "producer_id": -1, "producer_epoch": -1,
                    "throttle_time_ms": 0}
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch, "throttle_time_ms": 0}
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        return {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 1, "throttle_time_ms": 0}
    return {"error_code": 0, "producer_id": ctx.broker.admin.allocate_producer_id(), "producer_epoch": 0,
            "throttle_time_ms": 0}
