"""Generated protobuf modules of proto/dqnd/v1 (dqnd_pb2 is made by protoc at build time)."""
