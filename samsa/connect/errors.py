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


class RequestTargetException(ConnectException):
    """The request must be served by another worker, at ``forward_url`` (None: not known now)."""

    def __init__(self, message: str, forward_url: str | None):
        super().__init__(message)
        self.forward_url = forward_url


class NotLeaderException(RequestTargetException):
    """Only the group's leader may do this (it writes the config topic)."""


class NotAssignedException(RequestTargetException):
    """Only the worker running the connector or task may do this (the leader knows which it is)."""


class ConnectRestException(ConnectException):
    """A REST answer with its own status (Kafka's ConnectRestException), e.g. 403 for a bad signature."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
