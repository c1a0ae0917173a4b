"""SaslSession's transition table, without a socket (tests/security/test_sasl_session.py drives
it over the wire with raw frames)."""

from __future__ import annotations

from samsa.protocol import errors
from samsa.security.principal import KafkaPrincipal
from samsa.server.security import ListenerSecurity, SaslSession, SaslState

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-pw" user_bob="bob-pw";')


def session(got: list) -> SaslSession:
    sec = ListenerSecurity("SASL", "SASL_PLAINTEXT", mechanisms=["PLAIN"], jaas={"PLAIN": JAAS},
                           failed_auth_delay_ms=0)
    return SaslSession(sec, "127.0.0.1:5000", got.append)


def test_v0_and_v1_both_hand_over_the_principal():
    for version, state in ((0, SaslState.RAW_TOKENS), (1, SaslState.TOKENS)):
        got: list = []
        s = session(got)
        assert not s.admits()
        assert s.handshake("plain", version) == 0 and s.state is state
        assert s.authenticate(b"\0alice\0alice-pw") == (0, b"", 0)
        assert s.state is SaslState.AUTHENTICATED and s.admits()
        assert got == [KafkaPrincipal("User", "alice")]


def test_reauthentication_keeps_the_principal():
    got: list = []
    s = session(got)
    s.handshake("PLAIN", 1)
    s.authenticate(b"\0alice\0alice-pw")
    assert s.handshake("PLAIN", 1) == 0 and s.state is SaslState.REAUTHENTICATING and s.admits()
    assert s.authenticate(b"\0alice\0alice-pw")[0] == 0 and s.state is SaslState.AUTHENTICATED
    assert s.handshake("PLAIN", 1) == 0
    assert s.authenticate(b"\0bob\0bob-pw")[0] == errors.E_SASL_AUTHENTICATION_FAILED
    assert s.failed and "Cannot change principals" in s.failure and not s.admits()
    assert got == [KafkaPrincipal("User", "alice")] * 2


def test_out_of_order_and_unknown_mechanisms_fail():
    s = session([])
    assert s.authenticate(b"\0alice\0alice-pw")[0] == errors.E_ILLEGAL_SASL_STATE and s.failed
    s = session([])
    assert s.handshake("SCRAM-SHA-256", 1) == errors.E_UNSUPPORTED_SASL_MECHANISM and s.failed
    s = session([])
    s.handshake("PLAIN", 1)
    assert s.handshake("PLAIN", 1) == errors.E_ILLEGAL_SASL_STATE  # a second handshake mid-exchange
    s = session([])
    s.handshake("PLAIN", 0)
    s.authenticate(b"\0alice\0alice-pw")
    assert s.handshake("PLAIN", 0) == errors.E_ILLEGAL_SASL_STATE  # KIP-368 needs v1+
    s = session([])
    s.handshake("PLAIN", 0)
    assert s.authenticate(b"\0alice\0wrong")[0] == errors.E_SASL_AUTHENTICATION_FAILED
    assert "Invalid username or password" in s.failure
