"""A client config's TLS and SASL (:mod:`samsa.security.client`), with errors as ConfigError."""

from __future__ import annotations

from typing import Any, Mapping

from samsa.configdef import ConfigError
from samsa.security.client import ClientSecurity, client_security, properties_getter
from samsa.security.tls import SslConfigError


def security_of(config: Mapping[str, Any] | Any) -> ClientSecurity | None:
    """From a ClientConfig (typed values) or a plain mapping of properties (the Admin's)."""
    values = getattr(config, "values", None)
    get = (lambda key: values.get(key)) if isinstance(values, dict) else properties_getter(dict(config))
    try:
        return client_security(get)
    except (SslConfigError, ValueError) as e:
        raise ConfigError(str(e)) from None
