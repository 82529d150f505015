//! Log setup: `RUST_LOG` when set, else the reference's `--log-level`; text or JSON lines
//! on stderr.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The tracing directive for a reference-style level name (`DEBUG`, `INFO`, `WARNING`,
/// `ERROR`, `CRITICAL`); `None` for a name it does not know.
pub fn level_directive(level: &str) -> Option<&'static str> {
    match level.trim().to_ascii_uppercase().as_str() {
        "TRACE" => Some("trace"),
        "DEBUG" => Some("debug"),
        "INFO" => Some("info"),
        "WARN" | "WARNING" => Some("warn"),
        "ERROR" | "CRITICAL" | "FATAL" => Some("error"),
        _ => None,
    }
}

/// Install the global subscriber. An unknown `--log-level` falls back to INFO, as the
/// reference does, with a warning.
pub fn init(level: &str, format: LogFormat) {
    let directive = level_directive(level);
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"))
        }
        _ => EnvFilter::new(format!(
            "warn,sidecar={0},vllm_sidecar={0}",
            directive.unwrap_or("info")
        )),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if installed.is_ok() && directive.is_none() {
        tracing::warn!(level, "unknown --log-level, using INFO");
    }
}
