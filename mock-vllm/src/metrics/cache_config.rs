//! `vllm:cache_config_info`: one gauge at 1 per engine whose labels are the engine's
//! `CacheConfig` fields (`metrics_info` walks the config's `__dict__`), so the label set
//! is whatever fields that release's config has. Values are those of a default
//! `vllm serve` after start-up; the KV size follows the fake's capacity.

use super::Snapshot;
use crate::config::Dialect;
use crate::exposition::{Child, Family, Kind, Labels};

pub(super) fn family(c: &Snapshot) -> Family {
    let mut f = Family::new(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        Kind::Gauge,
    );
    for e in &c.engines {
        let blocks = e.kv_capacity / crate::stats::BLOCK_SIZE as u64;
        let labels = labels(c, blocks, e.index);
        f.children.push(Child::Value {
            labels,
            value: 1.0,
            created: None,
        });
    }
    f
}

fn s(v: &str) -> String {
    v.to_string()
}

fn labels(c: &Snapshot, blocks: u64, engine: usize) -> Labels {
    let engine = engine.to_string();
    match c.dialect {
        Dialect::V0 => v0(blocks),
        Dialect::V0_10 => v0_10(blocks, engine),
        Dialect::V0_33 | Dialect::V0_34 => {
            let tokens = blocks * crate::stats::BLOCK_SIZE as u64;
            let concurrency = tokens as f64 / f64::from(c.max_model_len.max(1));
            let concurrency = crate::exposition::python_repr((concurrency * 100.0).round() / 100.0);
            if c.dialect == Dialect::V0_33 {
                v0_33(blocks.to_string(), tokens.to_string(), concurrency, engine)
            } else {
                v0_34(blocks.to_string(), tokens.to_string(), concurrency, engine)
            }
        }
        _ => v0_11(blocks, engine),
    }
}

fn v0(blocks: u64) -> Labels {
    vec![
        ("block_size", s("16")),
        ("cache_dtype", s("auto")),
        ("cpu_offload_gb", s("0")),
        ("enable_prefix_caching", s("True")),
        ("gpu_memory_utilization", s("0.9")),
        ("is_attention_free", s("False")),
        ("num_cpu_blocks", s("2048")),
        ("num_gpu_blocks", blocks.to_string()),
        ("num_gpu_blocks_override", s("None")),
        ("sliding_window", s("None")),
        ("swap_space", s("4")),
        ("swap_space_bytes", s("4294967296")),
    ]
}

/// 0.10's fields (the fixture page's), hashing with `builtin`.
fn v0_10(blocks: u64, engine: String) -> Labels {
    let mut l = v0_11(blocks, engine);
    l.retain(|(k, _)| *k != "kv_cache_memory_bytes");
    for (k, v) in l.iter_mut() {
        if *k == "prefix_caching_hash_algo" {
            *v = s("builtin");
        }
    }
    l
}

/// 0.11 adds `kv_cache_memory_bytes` and hashes prefixes with `sha256` by default.
fn v0_11(blocks: u64, engine: String) -> Labels {
    vec![
        ("block_size", s("16")),
        ("cache_dtype", s("auto")),
        ("calculate_kv_scales", s("False")),
        ("cpu_kvcache_space_bytes", s("None")),
        ("cpu_offload_gb", s("0.0")),
        ("enable_prefix_caching", s("True")),
        ("engine", engine),
        ("gpu_memory_utilization", s("0.9")),
        ("is_attention_free", s("False")),
        ("kv_cache_memory_bytes", s("None")),
        ("kv_sharing_fast_prefill", s("False")),
        ("mamba_cache_dtype", s("auto")),
        ("mamba_page_size_padded", s("None")),
        ("mamba_ssm_cache_dtype", s("auto")),
        ("num_cpu_blocks", s("None")),
        ("num_gpu_blocks", blocks.to_string()),
        ("num_gpu_blocks_override", s("None")),
        ("prefix_caching_hash_algo", s("sha256")),
        ("sliding_window", s("None")),
        ("swap_space", s("4.0")),
        ("swap_space_bytes", s("4294967296.0")),
    ]
}

fn v0_33(blocks: String, tokens: String, concurrency: String, engine: String) -> Labels {
    vec![
        ("_block_size_resolved", s("True")),
        ("block_size", s("16")),
        ("cache_dtype", s("auto")),
        ("cache_hit_alignment_tokens", s("None")),
        ("effective_attention_block_size", s("16")),
        ("enable_mamba_shared_prefix_checkpoint", s("False")),
        ("enable_prefix_caching", s("True")),
        ("engine", engine.clone()),
        ("gpu_memory_utilization", s("0.92")),
        ("hash_block_size", s("16")),
        ("is_attention_free", s("False")),
        ("kv_cache_dtype_skip_layers", s("[]")),
        ("kv_cache_layout", s("None")),
        ("kv_cache_max_concurrency", concurrency.clone()),
        ("kv_cache_memory_bytes", s("None")),
        ("kv_cache_size_tokens", tokens.clone()),
        ("kv_offloading_backend", s("native")),
        ("kv_offloading_size", s("None")),
        ("kv_sharing_fast_prefill", s("False")),
        ("mamba_block_size", s("None")),
        ("mamba_cache_dtype", s("auto")),
        ("mamba_cache_mode", s("none")),
        ("mamba_page_size_padded", s("None")),
        ("mamba_ssm_cache_dtype", s("auto")),
        ("num_cpu_blocks", s("None")),
        ("num_gpu_blocks", blocks.clone()),
        ("num_gpu_blocks_override", s("None")),
        ("prefix_cache_retention_interval", s("0")),
        ("prefix_caching_hash_algo", s("sha256")),
        ("prefix_match_unit", s("None")),
        ("replayssm_buffer_len", s("16")),
        ("simple_cpu_offload_num_blocks", s("None")),
        ("skip_page_size_padded", s("None")),
        ("sliding_window", s("None")),
        ("swa_bounded_replay", s("True")),
        ("use_kda_recoverssm", s("False")),
        ("use_replayssm", s("False")),
        ("user_specified_block_size", s("False")),
    ]
}

fn v0_34(blocks: String, tokens: String, concurrency: String, engine: String) -> Labels {
    vec![
        ("_block_size_resolved", s("True")),
        ("_extensible_kv_cache_resolved", s("False")),
        ("block_size", s("16")),
        ("cache_dtype", s("auto")),
        ("cache_hit_alignment_tokens", s("None")),
        ("effective_attention_block_size", s("16")),
        ("enable_extensible_kv_cache", s("None")),
        ("enable_mamba_shared_prefix_checkpoint", s("False")),
        ("enable_prefix_caching", s("True")),
        ("engine", engine.clone()),
        ("gpu_memory_utilization", s("None")),
        ("hash_block_size", s("16")),
        ("is_attention_free", s("False")),
        ("kv_cache_dtype_skip_layers", s("[]")),
        ("kv_cache_layout", s("None")),
        ("kv_cache_max_concurrency", concurrency.clone()),
        ("kv_cache_memory_bytes", s("None")),
        ("kv_cache_size_tokens", tokens.clone()),
        ("kv_offloading_backend", s("native")),
        ("kv_offloading_size", s("None")),
        ("kv_sharing_fast_prefill", s("False")),
        ("mamba_block_size", s("None")),
        ("mamba_cache_dtype", s("auto")),
        ("mamba_cache_mode", s("none")),
        ("mamba_page_size_padded", s("None")),
        ("mamba_ssm_cache_dtype", s("auto")),
        ("num_cpu_blocks", s("None")),
        ("num_gpu_blocks", blocks.clone()),
        ("num_gpu_blocks_override", s("None")),
        ("prefix_cache_retention_interval", s("0")),
        ("prefix_caching_hash_algo", s("sha256")),
        ("prefix_match_unit", s("None")),
        ("replayssm_buffer_len", s("16")),
        ("simple_cpu_offload_num_blocks", s("None")),
        ("skip_page_size_padded", s("None")),
        ("sliding_window", s("None")),
        ("swa_bounded_replay", s("True")),
        ("use_kda_recoverssm", s("False")),
        ("use_replayssm", s("False")),
        ("user_specified_block_size", s("False")),
    ]
}
