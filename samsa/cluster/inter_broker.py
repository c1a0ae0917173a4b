"""How this broker connects to the others (replica fetchers, transaction markers): as a
client of ``inter.broker.listener.name``, with that listener's ``ssl.*`` keys and, on SASL,
``sasl.mechanism.inter.broker.protocol`` and the username/password of the listener's JAAS
line for that mechanism (as Kafka's broker logs in to its peers)."""

from __future__ import annotations

import weakref

from samsa.broker_config import BrokerConfig, ConfigError
from samsa.security.client import ClientSecurity
from samsa.security.jaas import parse_jaas
from samsa.security.tls import SslConfigError, client_context

_cache: "weakref.WeakKeyDictionary[BrokerConfig, ClientSecurity | None]" = weakref.WeakKeyDictionary()


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """None when the inter-broker listener is PLAINTEXT."""
    if config in _cache:
        return _cache[config]
    name = config.inter_broker_listener
    protocol = config.security_protocol(name)
    sec: ClientSecurity | None = None
    if protocol != "PLAINTEXT":
        get = lambda key: config.listener_value(name, key)  # noqa: E731
        sec = ClientSecurity(protocol)
        if protocol in ("SSL", "SASL_SSL"):
            try:
                sec.ssl_context = client_context(get)
            except SslConfigError as e:
                raise ConfigError(f"inter-broker listener {name}: {e}") from None
        if sec.sasl:
            mech = (config["sasl.mechanism.inter.broker.protocol"] or "GSSAPI").upper()
            jaas = config.jaas_config(name, mech)
            options = parse_jaas(jaas).options if jaas else {}
            sec.mechanism, sec.options = mech, options
            sec.username, sec.password = options.get("username"), options.get("password")
    _cache[config] = sec
    return sec
