from samsa.aio.consumer import AIOConsumer  # noqa: F401
