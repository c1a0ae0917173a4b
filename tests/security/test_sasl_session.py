"""The SASL session on the wire, with raw frames on a SASL_PLAINTEXT listener with ACLs.

SaslHandshake v0 (the tokens follow as bare size-prefixed frames, no SaslAuthenticate) must
leave the connection authorized as the user it proved to be, with PLAIN and SCRAM, exactly as
SaslHandshake v1 does; a failed authentication is answered after
``connection.failed.authentication.delay.ms`` (KIP-306) and the connection closed."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from broker_process import BrokerProcess
from samsa.protocol import api
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.errors import E_SASL_AUTHENTICATION_FAILED, E_TOPIC_AUTHORIZATION_FAILED
from samsa.security.scram import ScramClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')
DELAY_MS = 300
TOPIC = "alice-only"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sasl-session"), **{
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false", "connection.failed.authentication.delay.ms": DELAY_MS})
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-pw"})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(15)
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice",
                                           "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)]).values():
        f.result(15)
    for f in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), f"{u}-scram".encode())
            for u in ("alice", "bob")]).values():
        f.result(15)
    yield b
    b.stop()


class Raw:
    """One connection speaking frames by hand."""

    def __init__(self, broker):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        self.correlation = 0

    def close(self):
        self.sock.close()

    def frame(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def request(self, key: int, version: int, body: dict) -> dict:
        self.correlation += 1
        self.sock.sendall(b"".join(api.encode_request(key, version, self.correlation, "raw", body)))
        correlation, answer = api.decode_response(key, version, self.frame())
        assert correlation == self.correlation
        return answer

    def token(self, token: bytes) -> bytes:
        """A bare token after SaslHandshake v0, and the server's bare answer."""
        self.sock.sendall(struct.pack(">i", len(token)) + token)
        return self.frame()

    def topic_error(self) -> int:
        answer = self.request(ApiKey.METADATA, 1, {"topics": [{"name": TOPIC}]})
        return answer["topics"][0]["error_code"]


def v0_login(broker, mechanism: str, user: str, password: str) -> Raw:
    raw = Raw(broker)
    assert raw.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": mechanism})["error_code"] == 0
    if mechanism == "PLAIN":
        assert raw.token(b"\0" + user.encode() + b"\0" + password.encode()) == b""
    else:
        scram = ScramClient(mechanism, user, password)
        server_first = raw.token(scram.first())
        scram.verify(raw.token(scram.final(server_first)))
    return raw


@pytest.mark.parametrize("mechanism,password", [("PLAIN", "{}-pw"), ("SCRAM-SHA-256", "{}-scram")])
def test_v0_client_is_authorized_as_its_user(broker, mechanism, password):
    alice = v0_login(broker, mechanism, "alice", password.format("alice"))
    bob = v0_login(broker, mechanism, "bob", password.format("bob"))
    try:
        assert alice.topic_error() == 0
        assert bob.topic_error() == E_TOPIC_AUTHORIZATION_FAILED
    finally:
        alice.close()
        bob.close()


def test_v1_client_is_authorized_as_its_user(broker):
    raw = Raw(broker)
    try:
        assert raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        answer = raw.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-pw"})
        assert answer["error_code"] == 0
        assert raw.topic_error() == 0
    finally:
        raw.close()


def test_failed_v0_authentication_closes_after_the_delay(broker):
    raw = Raw(broker)
    try:
        assert raw.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        started = time.monotonic()
        with pytest.raises(ConnectionError):
            raw.token(b"\0alice\0wrong")
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    finally:
        raw.close()


def test_failed_v1_authentication_is_answered_after_the_delay(broker):
    raw = Raw(broker)
    try:
        assert raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        started = time.monotonic()
        answer = raw.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0wrong"})
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert answer["error_code"] == E_SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in answer["error_message"]
        with pytest.raises(ConnectionError):
            raw.frame()
    finally:
        raw.close()


def test_out_of_order_requests_are_refused(broker):
    raw = Raw(broker)
    try:  # a request before authentication: the connection closes, no answer
        raw.sock.sendall(b"".join(api.encode_request(ApiKey.METADATA, 1, 1, "raw", {"topics": []})))
        with pytest.raises(ConnectionError):
            raw.frame()
    finally:
        raw.close()
    raw = Raw(broker)
    try:  # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then closed
        answer = raw.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-pw"})
        assert answer["error_code"] == 34  # ILLEGAL_SASL_STATE
        with pytest.raises(ConnectionError):
            raw.frame()
    finally:
        raw.close()
    assert "Unexpected Kafka request of type Metadata during SASL handshake" in broker.log_text()
