"""Connect's exceptions, named as Kafka's are (they show in traces and REST errors)."""


class ConnectException(Exception):
    """org.apache.kafka.connect.errors.ConnectException"""


class DataException(ConnectException):
    """A record that cannot be converted or transformed (tolerable with errors.tolerance=all)."""


class RetriableException(ConnectException):
    """The task should be called again with the same records."""


class NotFoundException(ConnectException):
    """REST 404."""


class BadRequestException(ConnectException):
    """REST 400."""


class ConflictException(ConnectException):
    """REST 409 (a connector that exists, a rebalance under way)."""
