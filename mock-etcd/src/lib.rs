//! mock-etcd: an in-memory fake of etcd's v3 JSON gateway (grpc-gateway), with faults.
