#!/usr/bin/env python3
"""Streams a generation from a linserve server, then continues the same session.

A linserve session is the model's whole recurrent state: the second request below starts
where the first one stopped, without resending the conversation.

The gRPC stubs are generated from proto/ with protoc and Debian's grpc_python_plugin (the CMake
build writes them to <build>/client/python/stubs; docs/clients.md shows the command):

    python3 client/python/linserve_example.py --stubs build/client/python/stubs \
        --target localhost:50051 --prompt "ROMEO:" --then "JULIET:"

Generated text goes to stdout as it arrives; what happened (usage, session) goes to stderr.
Exit status: 0 on success, 1 on a gRPC error (its status name and message on stderr).
"""

import argparse
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="localhost:50051", help="server host:port")
    parser.add_argument("--stubs", required=True,
                        help="directory holding the generated linserve/v1/*_pb2*.py")
    parser.add_argument("--prompt", default="ROMEO:", help="first request's prompt")
    parser.add_argument("--then", default="\nJULIET:",
                        help="second request's prompt, continuing the same session")
    parser.add_argument("--max-new-tokens", type=int, default=64,
                        help="tokens to generate per request")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of each request's sampling (same seed: same text)")
    parser.add_argument("--token", default="", help="bearer token, when the server needs one")
    parser.add_argument("--ca-cert", default="",
                        help="PEM CA certificate: connect with TLS and trust this CA")
    parser.add_argument("--keep", action="store_true",
                        help="keep the session on the server (default: delete it at the end)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, args.stubs)
    import grpc
    from linserve.v1 import generate_pb2, model_pb2, service_pb2_grpc, session_pb2

    if args.ca_cert:
        with open(args.ca_cert, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(args.target, credentials)
    else:
        channel = grpc.insecure_channel(args.target)
    metadata = [("authorization", "Bearer " + args.token)] if args.token else []
    stub = service_pb2_grpc.LinServeStub(channel)

    def generate(session_id, prompt):
        request = generate_pb2.GenerateRequest(
            text=prompt,
            session_id=session_id,
            max_new_tokens=args.max_new_tokens,
            sampling=generate_pb2.SamplingParams(temperature=args.temperature,
                                                 seed=args.seed))
        last = None
        for response in stub.Generate(request, metadata=metadata):
            sys.stdout.write(response.text)
            sys.stdout.flush()
            last = response
        sys.stdout.write("\n")
        return last

    session = None
    try:
        info = stub.GetModelInfo(model_pb2.GetModelInfoRequest(), metadata=metadata)
        print(f"model {info.model.architecture}: {info.model.parameter_count} parameters, "
              f"{info.state_bytes_per_session} state bytes per session, on {info.device}",
              file=sys.stderr)
        session = stub.CreateSession(session_pb2.CreateSessionRequest(), metadata=metadata)
        for turn, prompt in enumerate([args.prompt, args.then], start=1):
            sys.stdout.write(prompt)
            last = generate(session.id, prompt)
            usage = last.usage
            reason = generate_pb2.FinishReason.Name(last.finish_reason)
            print(f"turn {turn}: {reason} prompt_tokens={usage.prompt_tokens} "
                  f"generated_tokens={usage.generated_tokens} "
                  f"session_tokens={usage.session_tokens} request_id={last.request_id}",
                  file=sys.stderr)
        state = stub.GetSession(session_pb2.GetSessionRequest(session_id=session.id),
                                metadata=metadata)
        print(f"session {state.id}: {state.num_tokens} tokens", file=sys.stderr)
        if not args.keep:
            stub.DeleteSession(session_pb2.DeleteSessionRequest(session_id=session.id),
                               metadata=metadata)
    except grpc.RpcError as error:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
