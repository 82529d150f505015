//! Prometheus text 0.0.4 / OpenMetrics 1.0 parser. (Interface stub: the parser issue fills it.)

/// Which text format a page is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// Pick the format from an HTTP `Content-Type` (OpenMetrics when it says so).
    pub fn from_content_type(content_type: &str) -> Format {
        if content_type.to_ascii_lowercase().contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// Lenient skips and counts bad lines (the scrape path); strict stops at the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Lenient,
    Strict,
}

/// A parsed page: samples borrow from the input text.
#[derive(Debug, Default)]
pub struct Page<'a> {
    pub samples: Vec<Sample<'a>>,
    /// Lines skipped in lenient mode.
    pub skipped_lines: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Vec<(&'a str, std::borrow::Cow<'a, str>)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parse a page. Stub: answers an empty page.
pub fn parse(_text: &str, _format: Format, _mode: Mode) -> Result<Page<'_>, ParseError> {
    Ok(Page::default())
}
