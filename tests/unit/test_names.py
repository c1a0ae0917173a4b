"""Generated names: ApiKey and the error classes match schema/, and encoders refuse unknown keys."""

from __future__ import annotations

import pytest

from samsa.protocol import api, codec, errors, generate
from samsa.protocol.api_keys import ApiKey


def test_generated_modules_are_up_to_date():
    assert generate.main(["--check"]) == 0


def test_api_keys_name_every_request_in_the_schemas():
    assert ApiKey.PRODUCE == 0 and ApiKey.JOIN_GROUP == 11 and ApiKey.DESCRIBE_CLUSTER == 60
    assert {k.value for k in ApiKey} == set(api.apis())
    for key in ApiKey:
        assert codec.snake(api.api(key).name).upper() == key.name


def test_every_error_code_has_a_class_and_a_constant():
    for entry in generate.error_table():
        code = entry["code"]
        if code == 0:
            continue
        cls = errors.ERROR_CLASSES[code]
        assert getattr(errors, "E_" + entry["name"]) == code
        e = errors.error_for(code, "why")
        assert type(e) is cls and e.code == code and e.name == entry["name"]
        assert e.retriable is entry["retriable"] and str(e) == f"{entry['name']}: why"
    assert errors.CoordinatorNotAvailableError.code == 15
    assert errors.CorruptRecordError.error_name == "CORRUPT_MESSAGE"


def test_an_unknown_code_keeps_its_number():
    e = errors.error_for(999, "odd")
    assert e.code == 999 and e.name == "UNKNOWN_ERROR_CODE_999" and not e.retriable


def test_the_encoder_refuses_a_misspelt_key(monkeypatch):
    assert codec.STRICT, "tests/conftest.py turns the strict encoder on"
    with pytest.raises(codec.UnknownFieldError, match="eror_code"):
        api.encode_response(ApiKey.HEARTBEAT, 4, 1, {"eror_code": 27})
    # A field of another version of the message is not unknown (handlers set every version's fields).
    api.encode_response(ApiKey.PRODUCE, 3, 1, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 0, "error_message": None}]}], "throttle_time_ms": 0})
