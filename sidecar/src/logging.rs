//! Log setup: `RUST_LOG` when set, else the reference's `--log-level`; text or JSON lines
//! on stderr.
//!
//! A log line that cannot be written is dropped, never fatal: when the reader of stderr
//! goes away (a log collector restarted, a closed pipe), tracing-subscriber would report
//! the failed write with `eprintln!`, which panics on the same closed stderr, and the
//! sidecar would die without revoking its lease. So lines go through [`QuietStderr`],
//! which swallows write errors, and tracing's own error report is off.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;
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
        .with_writer(QuietStderr)
        .log_internal_errors(false)
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

/// stderr for log lines, with every write error swallowed (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One whole line per call (tracing formats a line, then writes it): a failed or
        // partial write loses that line only.
        let _ = std::io::stderr().lock().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for QuietStderr {
    type Writer = QuietStderr;

    fn make_writer(&'a self) -> QuietStderr {
        QuietStderr
    }
}
