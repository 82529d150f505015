//! mock-vllm: a CPU-only fake vLLM OpenAI server with a load model, metric dialects and faults.
