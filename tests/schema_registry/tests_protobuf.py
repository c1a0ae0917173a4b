"""A Protobuf message class built at run time from a FileDescriptorProto (no protoc needed)."""

from __future__ import annotations

import itertools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_n = itertools.count()


def message_class(value_type: str = "int64"):
    kinds = {"int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
             "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING}
    fdp = descriptor_pb2.FileDescriptorProto(name=f"readings_{next(_n)}.proto" if value_type != "int64"
                                             else "readings.proto", package="samsa.test", syntax="proto3")
    m = fdp.message_type.add(name="Reading")
    m.field.add(name="sensor", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    m.field.add(name="value", number=2, type=kinds[value_type], label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("samsa.test.Reading"))
