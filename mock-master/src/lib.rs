//! mock-master: a fake xllm-service master as vLLM instances see it (heartbeats, registry, routing).
