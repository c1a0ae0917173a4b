"""asyncio faces of Samsa's clients: the same cores, run on the caller's event loop."""

from samsa.aio.consumer import AIOConsumer  # noqa: F401
from samsa.aio.producer import AIOProducer  # noqa: F401
from samsa.aio.share_consumer import AIOShareConsumer  # noqa: F401
