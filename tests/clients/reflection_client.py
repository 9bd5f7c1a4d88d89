"""A client that knows nothing of linserve's API but what server reflection tells it.

It uses no generated stubs of linserve's .proto files: it lists the services, asks reflection for
the file that defines linserve.v1.LinServe (and for grpc.health.v1.Health), builds the message
classes from the returned FileDescriptorProtos alone, then calls Health.Check and streams a
Generate, the way grpcurl or a reflection-driven UI would. Only the reflection protocol itself
(grpc.reflection.v1alpha, a public, stable schema) is described here, in code, because Debian
ships no Python module for it.

  reflection_client.py --target 127.0.0.1:PORT

Prints one "key: value" line per fact it checked; exits non-zero with the reason on failure.
"""

import argparse
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


def _reflection_messages():
    """ServerReflectionRequest / ServerReflectionResponse of grpc.reflection.v1alpha."""
    f = descriptor_pb2.FileDescriptorProto(
        name="reflection_client/reflection.proto",
        package="grpc.reflection.v1alpha",
        syntax="proto3",
    )
    T = descriptor_pb2.FieldDescriptorProto

    def message(name, fields):
        m = f.message_type.add(name=name)
        for field_name, number, kind, type_name, label, oneof in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = ".grpc.reflection.v1alpha." + type_name
            if oneof is not None:
                if not m.oneof_decl:
                    m.oneof_decl.add(name=oneof)
                field.oneof_index = 0
        return m

    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    message("ServerReflectionRequest", [
        ("host", 1, T.TYPE_STRING, None, opt, None),
        ("file_by_filename", 3, T.TYPE_STRING, None, opt, "message_request"),
        ("file_containing_symbol", 4, T.TYPE_STRING, None, opt, "message_request"),
        ("list_services", 7, T.TYPE_STRING, None, opt, "message_request"),
    ])
    message("FileDescriptorResponse", [("file_descriptor_proto", 1, T.TYPE_BYTES, None, rep, None)])
    message("ServiceResponse", [("name", 1, T.TYPE_STRING, None, opt, None)])
    message("ListServiceResponse", [("service", 1, T.TYPE_MESSAGE, "ServiceResponse", rep, None)])
    message("ErrorResponse", [
        ("error_code", 1, T.TYPE_INT32, None, opt, None),
        ("error_message", 2, T.TYPE_STRING, None, opt, None),
    ])
    message("ServerReflectionResponse", [
        ("valid_host", 1, T.TYPE_STRING, None, opt, None),
        ("original_request", 2, T.TYPE_MESSAGE, "ServerReflectionRequest", opt, None),
        ("file_descriptor_response", 4, T.TYPE_MESSAGE, "FileDescriptorResponse", opt,
         "message_response"),
        ("list_services_response", 6, T.TYPE_MESSAGE, "ListServiceResponse", opt,
         "message_response"),
        ("error_response", 7, T.TYPE_MESSAGE, "ErrorResponse", opt, "message_response"),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        return factory.GetPrototype(pool.FindMessageTypeByName("grpc.reflection.v1alpha." + name))

    return cls("ServerReflectionRequest"), cls("ServerReflectionResponse")


class Reflection:
    def __init__(self, channel):
        self._request, self._response = _reflection_messages()
        self._call = channel.stream_stream(
            REFLECTION_METHOD,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self._response.FromString)

    def ask(self, **field):
        responses = list(self._call(iter([self._request(**field)]), timeout=10))
        if len(responses) != 1:
            raise RuntimeError(f"reflection {field}: {len(responses)} responses")
        r = responses[0]
        if r.WhichOneof("message_response") == "error_response":
            raise RuntimeError(f"reflection {field}: error {r.error_response.error_code} "
                               f"{r.error_response.error_message!r}")
        return r

    def services(self):
        return [s.name for s in self.ask(list_services="").list_services_response.service]

    def files(self, **field):
        """FileDescriptorProtos for a symbol or file name (the server sends its dependencies)."""
        blobs = self.ask(**field).file_descriptor_response.file_descriptor_proto
        return [descriptor_pb2.FileDescriptorProto.FromString(b) for b in blobs]


def add_files(pool, files, reflection):
    """Adds files to pool dependencies first, asking reflection for any dependency not sent."""
    known = {f.name: f for f in files}
    added = set()

    def add(name):
        if name in added:
            return
        if name not in known:
            for f in reflection.files(file_by_filename=name):
                known.setdefault(f.name, f)
        for dep in known[name].dependency:
            add(dep)
        pool.Add(known[name])
        added.add(name)

    for f in files:
        add(f.name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    args = parser.parse_args()

    channel = grpc.insecure_channel(args.target)
    reflection = Reflection(channel)
    services = reflection.services()
    print("services:", " ".join(sorted(services)))
    for needed in ("linserve.v1.LinServe", "grpc.health.v1.Health"):
        if needed not in services:
            sys.exit(f"reflection lists no {needed}")

    pool = descriptor_pool.DescriptorPool()
    linserve_files = reflection.files(file_containing_symbol="linserve.v1.LinServe")
    print("linserve file:", linserve_files[0].name)
    add_files(pool, linserve_files, reflection)
    add_files(pool, reflection.files(file_containing_symbol="grpc.health.v1.Health"), reflection)
    # Every message of the API resolves by symbol too, as grpcurl's "describe" asks.
    print("GenerateRequest file:",
          reflection.files(file_containing_symbol="linserve.v1.GenerateRequest")[0].name)
    factory = message_factory.MessageFactory(pool)

    def rpc(service_name, method_name, streaming):
        method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
        request_cls = factory.GetPrototype(method.input_type)
        response_cls = factory.GetPrototype(method.output_type)
        path = f"/{service_name}/{method_name}"
        make = channel.unary_stream if streaming else channel.unary_unary
        return request_cls, make(path, request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=response_cls.FromString)

    health_request, health_check = rpc("grpc.health.v1.Health", "Check", streaming=False)
    health = health_check(health_request(service="linserve.v1.LinServe"), timeout=10)
    print("health:", health.DESCRIPTOR.fields_by_name["status"].enum_type
          .values_by_number[health.status].name)

    generate_request, generate = rpc("linserve.v1.LinServe", "Generate", streaming=True)
    request = json_format.ParseDict(
        {"tokenIds": {"ids": [1, 2, 3]}, "maxNewTokens": 5, "sampling": {"temperature": 0}},
        generate_request())
    tokens, finish, usage = [], None, None
    for response in generate(request, timeout=30):
        tokens.extend(t.id for t in response.tokens)
        if response.HasField("usage"):
            finish = response.DESCRIPTOR.fields_by_name["finish_reason"].enum_type \
                .values_by_number[response.finish_reason].name
            usage = response.usage
    print("generated tokens:", " ".join(map(str, tokens)))
    print("finish:", finish)
    print("usage:", f"prompt_tokens={usage.prompt_tokens} generated_tokens={usage.generated_tokens}")


if __name__ == "__main__":
    main()
