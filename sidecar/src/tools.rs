//! The `parse` and `preview` subcommands: the parser and the mapping, by hand.
//!
//! `parse` shows exactly what the parser reads from a page (or why a page is not valid,
//! with `--strict`); `preview` shows the heartbeat metrics the sidecar would send for a
//! page, with `--previous` giving the earlier scrape that interval statistics need.
//! Both print JSON on stdout and diagnostics on stderr.

use std::io::{Read, Write};
use std::time::Duration;

use crate::mapping::{LatencyStat, Mapper, MapperConfig};
use crate::prom::{self, Format, Mode, Sample};

/// Text format flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    Prometheus,
    Openmetrics,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Prometheus => Format::Prometheus,
            FormatArg::Openmetrics => Format::OpenMetrics,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ParseArgs {
    /// Stop at the first violation of the format (exit 1) instead of skipping bad lines.
    #[arg(long)]
    pub strict: bool,
    /// Text format of the page.
    #[arg(long, value_enum, default_value = "prometheus")]
    pub format: FormatArg,
    /// The page: a file, or `-` for stdin.
    #[arg(value_name = "FILE|-")]
    pub input: String,
}

#[derive(Debug, clap::Args)]
pub struct PreviewArgs {
    /// Latency statistic over the interval from --previous to the page.
    #[arg(long, value_enum, default_value = "avg")]
    pub latency_stat: LatencyStat,
    /// Only read samples whose `model_name` label is this.
    #[arg(long)]
    pub model: Option<String>,
    /// The earlier scrape (file or http(s) URL); without it latencies are 0, as on the
    /// sidecar's first scrape.
    #[arg(long, value_name = "FILE|URL")]
    pub previous: Option<String>,
    /// Text format; by default taken from the Content-Type of a URL, else Prometheus.
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Timeout of each HTTP fetch, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Largest page accepted, in bytes.
    #[arg(long, default_value_t = MAX_PAGE_BYTES)]
    pub max_bytes: usize,
    /// The page (file or http(s) URL).
    #[arg(value_name = "FILE|URL")]
    pub input: String,
}

/// Default cap on a page read from a file, stdin or URL.
pub const MAX_PAGE_BYTES: usize = 64 << 20;

/// Runs `vllm-sidecar parse`; answers the process exit code (1 when strict parsing
/// failed, 2 when the input cannot be read).
pub fn run_parse(args: ParseArgs) -> i32 {
    let fail = |code, error: &dyn std::fmt::Display| {
        eprintln!("vllm-sidecar parse: {error}");
        code
    };
    let bytes = match read_local(&args.input, MAX_PAGE_BYTES) {
        Ok(b) => b,
        Err(e) => return fail(2, &e),
    };
    let mode = if args.strict {
        Mode::Strict
    } else {
        Mode::Lenient
    };
    let text = match to_text(&bytes, mode) {
        Ok(t) => t,
        Err(e) => return fail(1, &e),
    };
    let page = match prom::parse(&text, args.format.into(), mode) {
        Ok(p) => p,
        Err(e) => return fail(1, &e),
    };
    report_skipped("vllm-sidecar parse", &page);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut line = String::new();
    for s in &page.samples {
        line.clear();
        sample_json(s, &mut line);
        line.push('\n');
        if let Err(e) = out.write_all(line.as_bytes()) {
            return write_failed(e);
        }
    }
    if let Err(e) = out.flush() {
        return write_failed(e);
    }
    0
}

/// The lines the lenient parser skipped, on stderr, if any.
fn report_skipped(prefix: &str, page: &prom::Page<'_>) {
    if page.skipped_lines > 0 {
        let first = page.first_skipped.as_ref();
        let first = first.map(|e| format!("; first: {e}")).unwrap_or_default();
        eprintln!(
            "{prefix}: skipped {} bad line(s){first}",
            page.skipped_lines
        );
    }
}

fn write_failed(e: std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return 0; // `| head`: the reader has what it wanted.
    }
    eprintln!("vllm-sidecar: cannot write to stdout: {e}");
    1
}

/// One sample as `{"name","labels":{...},"value","timestamp_ms"}`, labels in page order.
/// No key repeats: the parser rejects a line that repeats a label name (see [`Mode`]).
pub fn sample_json(s: &Sample<'_>, out: &mut String) {
    out.push_str("{\"name\":");
    push_json_str(out, &s.name);
    out.push_str(",\"labels\":{");
    for (i, (n, v)) in s.labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(out, &n);
        out.push(':');
        push_json_str(out, &v);
    }
    out.push_str("},\"value\":");
    out.push_str(&json_value(s.value));
    out.push_str(",\"timestamp_ms\":");
    match s.timestamp_ms {
        Some(t) => out.push_str(&t.to_string()),
        None => out.push_str("null"),
    }
    out.push('}');
}

/// A float as JSON: a number, or the strings `"NaN"`, `"+Inf"`, `"-Inf"`.
pub fn json_value(v: f64) -> String {
    if v.is_nan() {
        "\"NaN\"".into()
    } else if v == f64::INFINITY {
        "\"+Inf\"".into()
    } else if v == f64::NEG_INFINITY {
        "\"-Inf\"".into()
    } else {
        serde_json::Number::from_f64(v)
            .map(|n| n.to_string())
            .unwrap_or_else(|| "null".into())
    }
}

fn push_json_str(out: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(j) => out.push_str(&j),
        Err(_) => out.push_str("\"\""),
    }
}

/// Runs `vllm-sidecar preview`; answers the process exit code (1 when a page cannot be
/// read).
pub fn run_preview(args: PreviewArgs) -> i32 {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        eprintln!("vllm-sidecar preview: --timeout must be a positive number of seconds");
        return 2;
    }
    let timeout = Duration::from_secs_f64(args.timeout.min(86_400.0));
    let mut mapper = Mapper::new(MapperConfig {
        latency_stat: args.latency_stat,
        model: args.model.clone(),
    });
    let mut metrics = None;
    for (what, source) in [
        ("previous page", args.previous.as_deref()),
        ("page", Some(args.input.as_str())),
    ] {
        let Some(source) = source else { continue };
        let (bytes, detected) = match load(source, timeout, args.max_bytes) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("vllm-sidecar preview: {what} {source}: {e}");
                return 1;
            }
        };
        let format = args
            .format
            .map(Format::from)
            .or(detected)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let page = match prom::parse(&text, format, Mode::Lenient) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("vllm-sidecar preview: {what} {source}: {e}");
                return 1;
            }
        };
        report_skipped(&format!("vllm-sidecar preview: {what}"), &page);
        metrics = Some(mapper.observe(&page));
    }
    let Some(metrics) = metrics else { return 1 };
    match serde_json::to_string(&metrics) {
        Ok(j) => {
            println!("{j}");
            0
        }
        Err(e) => {
            eprintln!("vllm-sidecar preview: {e}");
            1
        }
    }
}

/// Bytes to text: strict mode wants valid UTF-8 (and says where it is not); lenient
/// mode replaces bad bytes, which at worst spoils the lines that hold them.
fn to_text(bytes: &[u8], mode: Mode) -> Result<String, String> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(e) if mode == Mode::Strict => {
            let at = e.valid_up_to();
            let line = bytes
                .get(..at)
                .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
                + 1;
            Err(format!("line {line}: invalid UTF-8"))
        }
        Err(_) => Ok(String::from_utf8_lossy(bytes).into_owned()),
    }
}

fn is_url(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://")
}

/// A file, stdin (`-`) or URL; with the format a URL's Content-Type names.
fn load(source: &str, timeout: Duration, cap: usize) -> Result<(Vec<u8>, Option<Format>), String> {
    if !is_url(source) {
        return read_local(source, cap).map(|b| (b, None));
    }
    fetch(source, timeout, cap)
}

/// GET a URL (on its own small runtime: the tools are synchronous), the body capped and
/// the whole exchange within `timeout`; with the format its Content-Type names.
fn fetch(url: &str, timeout: Duration, cap: usize) -> Result<(Vec<u8>, Option<Format>), String> {
    use crate::peers::http::{
        build_client, content_format, describe, read_capped, BodyError, Redirects,
    };
    let client = build_client(Redirects::Follow)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let exchange = async {
        let mut response = client.get(url).send().await.map_err(|e| describe(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        let format = content_format(&response);
        let body = read_capped(&mut response, cap).await.map_err(|e| match e {
            BodyError::TooLarge(cap) => format!("the page is larger than {cap} bytes"),
            BodyError::Read(e) => describe(&e),
        })?;
        Ok((body, format))
    };
    runtime.block_on(async {
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {timeout:?}")))
    })
}

/// A file or stdin, at most `cap` bytes.
fn read_local(source: &str, cap: usize) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let limit = cap as u64 + 1;
    let read = if source == "-" {
        std::io::stdin().lock().take(limit).read_to_end(&mut buf)
    } else {
        std::fs::File::open(source)
            .map_err(|e| format!("cannot open {source}: {e}"))?
            .take(limit)
            .read_to_end(&mut buf)
    };
    read.map_err(|e| format!("cannot read {source}: {e}"))?;
    if buf.len() > cap {
        return Err(format!("{source} is larger than {cap} bytes"));
    }
    Ok(buf)
}
