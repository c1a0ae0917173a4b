"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics, brokers and groups."""

from __future__ import annotations

from samsa.coordinator.groups.group_configs import GROUP_CONFIGS, OWN_DEFAULTS
from samsa.coordinator.groups.group_configs import validate as validate_group_configs
from samsa.protocol import errors
from samsa.broker_config import BROKER_KEYS, BROKER_SYNONYMS, HIDDEN_TOPIC_KEYS, TOPIC_KEYS, format_value
from samsa.protocol.api_keys import ApiKey
from samsa.server.handlers import handles
from samsa.server.handlers.authz import RT, Op, allowed, allowed_cluster

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
# ConfigSource
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT, GROUP_CONFIG = 1, 2, 3, 4, 5, 8
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7, "password": 9}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _authorize(ctx, operation: int, rtype: int, rname: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for a broker (Kafka's checks)."""
    if ctx.broker.authorizer is None:
        return
    if rtype == TOPIC:
        if not allowed(ctx, operation, RT.TOPIC, rname):
            raise errors.TopicAuthorizationFailedError(f"Not authorized to access topic {rname}")
    elif rtype in (BROKER, BROKER_LOGGER) and not allowed_cluster(ctx, operation):
        raise errors.ClusterAuthorizationFailedError("Not authorized to access the cluster's configs")
    elif rtype == GROUP and not allowed(ctx, operation, RT.GROUP, rname):
        raise errors.GroupAuthorizationFailedError(f"Not authorized to access group {rname}")


def broker_synonyms(broker, name: str) -> list[dict]:
    """Where a broker key's value comes from, most specific first (its coarser synonyms too)."""
    per_broker = broker.store.broker_configs(broker.broker_id)
    cluster_default = broker.store.broker_configs(None)
    out = []
    for key in BROKER_SYNONYMS.get(name, (name,)):
        if key in per_broker:
            out.append({"name": key, "value": per_broker[key], "source": DYNAMIC_BROKER})
        if key in cluster_default:
            out.append({"name": key, "value": cluster_default[key], "source": DYNAMIC_DEFAULT_BROKER})
        if key in broker.config.static:
            out.append({"name": key, "value": str(broker.config.static[key]), "source": STATIC_BROKER})
    # Kafka lists the default of the first synonym only (log.retention.ms's, null: none for retention.ms)
    first = BROKER_SYNONYMS.get(name, (name,))[0]
    default = format_value(BROKER_KEYS[first].default)
    if default is not None:
        out.append({"name": first, "value": default, "source": DEFAULT})
    return out


def _entry(name: str, value, key_type: str, synonyms: list[dict], read_only: bool) -> dict:
    source = synonyms[0]["source"] if synonyms else DEFAULT
    sensitive = key_type == "password"  # Kafka never tells a password's value
    if sensitive:
        value = None
        synonyms = [{**s, "value": None} for s in synonyms]
    return {"name": name, "value": format_value(value), "read_only": read_only, "is_default": source == DEFAULT,
            "config_source": source, "is_sensitive": sensitive, "synonyms": synonyms,
            "config_type": CONFIG_TYPES[key_type], "documentation": None}


def topic_entries(broker, topic: str, keys: list[str] | None, with_synonyms: bool,
                  overrides: dict[str, str] | None = None) -> list[dict]:
    """The described configs of ``topic``; of a topic not created (validate-only) with ``overrides``."""
    if overrides is None:
        overrides = broker.metadata.topics[topic].configs
        effective = broker.metadata.topic_config(topic)
    else:
        effective = broker.metadata.effective(overrides)
    out = []
    for name, (synonym, key) in sorted(TOPIC_KEYS.items()):
        if (keys is not None and name not in keys) or name in HIDDEN_TOPIC_KEYS:
            continue
        synonyms = [{"name": name, "value": overrides[name], "source": TOPIC_CONFIG}] if name in overrides else []
        if synonym is not None:
            synonyms += broker_synonyms(broker, synonym)
        # a topic-only key at its default has no synonyms in Kafka's answer
        entry = _entry(name, effective[name], key.type, synonyms, read_only=False)
        if not with_synonyms:
            entry["synonyms"] = []
        out.append(entry)
    return out


def broker_entries(broker, keys: list[str] | None, with_synonyms: bool) -> list[dict]:
    out = []
    for name, key in sorted(BROKER_KEYS.items()):
        if keys is not None and name not in keys:
            continue
        synonyms = broker_synonyms(broker, name)
        entry = _entry(name, broker.config[name], key.type, synonyms, read_only=not key.dynamic)
        if not with_synonyms:
            entry["synonyms"] = []
        out.append(entry)
    return out


def group_entries(broker, group: str, keys: list[str] | None, with_synonyms: bool) -> list[dict]:
    """A group's configs: its own value (GROUP_CONFIG) or the broker's key it overrides."""
    own = broker.store.entity_configs(f"groups/{group}")
    out = []
    for name, (broker_key, _, _) in sorted(GROUP_CONFIGS.items()):
        if keys is not None and name not in keys:
            continue
        synonyms = [{"name": name, "value": own[name], "source": GROUP_CONFIG}] if name in own else []
        if broker_key is None:  # a share group key of its own: its default, named as itself
            key_type, fallback = OWN_DEFAULTS[name]
            synonyms.append({"name": name, "value": fallback, "source": DEFAULT})
        else:
            key_type, fallback = BROKER_KEYS[broker_key].type, broker.config[broker_key]
            synonyms += broker_synonyms(broker, broker_key)
        value = own[name] if name in own else fallback
        entry = _entry(name, value, key_type, synonyms, read_only=False)
        if not with_synonyms:
            entry["synonyms"] = []
        out.append(entry)
    return out


def _broker_target(broker, resource_name: str, describe: bool = False) -> int | None:
    """None for the cluster-wide default (empty name); else this broker's id or an error, worded
    as Kafka words it for DescribeConfigs (``describe``) and for the alters."""
    if resource_name == "":
        return None
    try:
        target = int(resource_name)
    except ValueError:
        raise errors.InvalidRequestError(f"{'Broker' if describe else 'Node'} id must be an integer, "
                                         f"but it is: {resource_name}") from None
    if target != broker.broker_id:
        raise errors.InvalidRequestError(f"Unexpected broker id, expected {broker.broker_id}"
                                         f"{' or empty string' if describe else ''}, but received {target}")
    return target


@handles(ApiKey.DESCRIBE_CONFIGS)
def describe_configs(ctx, req: dict) -> dict:
    broker = ctx.broker
    results = []
    for r in req["resources"]:
        rtype, rname = r["resource_type"], r["resource_name"]
        # Kafka answers "" (not null) as the message of a described resource, and of an unknown topic
        result = {"error_code": 0, "error_message": "", "resource_type": rtype, "resource_name": rname,
                  "configs": []}
        try:
            _authorize(ctx, Op.DESCRIBE_CONFIGS, rtype, rname)
            synonyms = req.get("include_synonyms", False)
            if rtype == TOPIC:
                if rname not in broker.metadata.topics:
                    result["error_code"] = errors.UnknownTopicOrPartitionError.code
                    results.append(result)
                    continue
                result["configs"] = topic_entries(broker, rname, r["configuration_keys"], synonyms)
            elif rtype == BROKER:
                _broker_target(broker, rname, describe=True)
                result["configs"] = broker_entries(broker, r["configuration_keys"], synonyms)
            elif rtype == GROUP:
                if not rname:
                    raise errors.InvalidRequestError("Group name must not be empty")
                result["configs"] = group_entries(broker, rname, r["configuration_keys"], synonyms)
            else:
                raise errors.InvalidRequestError(f"Unsupported resource type {rtype}")
        except errors.KafkaError as e:
            result.update(error_code=e.code, error_message=e.message)
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def _apply(broker, rtype: int, rname: str, new: dict[str, str], validate_only: bool) -> None:
    if rtype == TOPIC:
        broker.admin.alter_topic_configs(rname, new, validate_only)
    elif rtype == BROKER:
        broker.admin.alter_broker_configs(_broker_target(broker, rname), new, validate_only)
    elif rtype == GROUP:
        validate_group_configs(new, broker.config.__getitem__)
        if not validate_only:
            broker.store.put_entity_configs(f"groups/{rname}", new)
            broker.groups.group_configs_changed(rname)
    else:
        raise errors.InvalidRequestError(f"Unsupported resource type {rtype}")


def _current(broker, rtype: int, rname: str) -> dict[str, str]:
    if rtype == TOPIC:
        if rname not in broker.metadata.topics:
            raise errors.UnknownTopicOrPartitionError(f"The topic '{rname}' does not exist.")
        return dict(broker.metadata.topics[rname].configs)
    if rtype == BROKER:
        return broker.store.broker_configs(_broker_target(broker, rname))
    if rtype == GROUP:
        if not rname:
            raise errors.InvalidRequestError("Group name must not be empty")
        return broker.store.entity_configs(f"groups/{rname}")
    raise errors.InvalidRequestError(f"Unsupported resource type {rtype}")


def _alter(ctx, req: dict, incremental: bool) -> dict:
    broker = ctx.broker
    responses = []
    seen = [(r["resource_type"], r["resource_name"]) for r in req["resources"]]
    for r in req["resources"]:
        rtype, rname = r["resource_type"], r["resource_name"]
        result = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": rname}
        try:
            if seen.count((rtype, rname)) > 1:
                raise errors.InvalidRequestError("Each resource must appear at most once.")
            _authorize(ctx, Op.ALTER_CONFIGS, rtype, rname)
            names = [c["name"] for c in r["configs"]]
            if len(set(names)) != len(names):
                raise errors.InvalidRequestError("Error due to duplicate config keys")
            if incremental:
                new = _current(broker, rtype, rname)
                for c in r["configs"]:
                    _incremental(new, c["name"], c["config_operation"], c["value"], rtype)
            else:
                _current(broker, rtype, rname)
                new = {c["name"]: c["value"] for c in r["configs"] if c["value"] is not None}
            _apply(broker, rtype, rname, new, req["validate_only"])
        except errors.UnknownServerError as e:  # Kafka's answer to an unknown operation: no message
            result.update(error_code=e.code, error_message=None if e.message == e.error_name else e.message)
        except errors.KafkaError as e:
            result.update(error_code=e.code, error_message=e.message)
        responses.append(result)
    return {"throttle_time_ms": 0, "responses": responses}


def _incremental(configs: dict[str, str], name: str, op: int, value: str | None, rtype: int) -> None:
    if rtype == GROUP:
        if name not in GROUP_CONFIGS:
            raise errors.InvalidConfigError(f"Unknown group config name: {name}")
        if GROUP_CONFIGS[name][0] is None:  # a share group key of its own (a string)
            if op in (APPEND, SUBTRACT):
                raise errors.InvalidConfigError(
                    f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} to key {name} because its type is not LIST.")
            key = None
        else:
            key = BROKER_KEYS[GROUP_CONFIGS[name][0]]
    else:
        key = (TOPIC_KEYS[name][1] if name in TOPIC_KEYS else None) if rtype == TOPIC else BROKER_KEYS.get(name)
    if key is None and rtype != GROUP:
        raise errors.InvalidConfigError(f"Unknown topic config name: {name}" if rtype == TOPIC else
                                        f"Unknown config name: {name}")
    if op == SET:
        configs[name] = value
    elif op == DELETE:
        configs.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        if key is None or key.type != "list":
            raise errors.InvalidConfigError(
                f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} to key {name} because its type is not LIST.")
        current = configs.get(name, format_value(key.default) or "")
        items = [x for x in current.split(",") if x]
        changes = [x for x in (value or "").split(",") if x]
        if op == APPEND:
            items += [x for x in changes if x not in items]
        else:
            items = [x for x in items if x not in changes]
        configs[name] = ",".join(items)
    else:
        raise errors.UnknownServerError()  # as Kafka 4.4 answers an operation it does not know


@handles(ApiKey.ALTER_CONFIGS)
def alter_configs(ctx, req: dict) -> dict:
    return _alter(ctx, req, incremental=False)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs(ctx, req: dict) -> dict:
    return _alter(ctx, req, incremental=True)
