//! Prometheus text 0.0.4 / OpenMetrics 1.0 parser: zero-copy, lenient or strict.
//!
//! The scrape path calls [`parse`] in [`Mode::Lenient`]: a bad line is skipped and
//! counted and the rest of the page is still used, because one odd metric must not cost
//! a heartbeat. [`Mode::Strict`] is for checking an exposition (`vllm-sidecar parse
//! --strict`): the first violation of the format is an error with its line number.
//!
//! Samples borrow from the page: name, label names and values are slices of the input
//! and are only copied when they hold an escape. The label set stays as validated text
//! ([`Labels`]), so a sample costs no allocation at all.
//!
//! - `lexer`: one line to tokens (byte-level; lines are split 64 bytes at a time).
//! - `names`: the label-name set behind the duplicate check (linear at any size).
//! - `number`: float and timestamp grammar and exact conversion.
//! - `sample`: the borrowed output types.
//! - `strict`: the rules that need more than one line.

mod lexer;
mod names;
mod number;
mod sample;
mod strict;

use std::borrow::Cow;

pub use sample::{LabelIter, Labels, Sample};

pub(crate) use number::parse_f64;

use lexer::{Comment, Dialect};

/// Which text format a page is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// Pick the format from an HTTP `Content-Type` (OpenMetrics when it says so).
    /// The type is searched in place, ASCII case ignored (no copy: a simulator asks
    /// this on every scrape).
    pub fn from_content_type(content_type: &str) -> Format {
        const OPENMETRICS: &[u8] = b"application/openmetrics-text";
        if content_type
            .as_bytes()
            .windows(OPENMETRICS.len())
            .any(|w| w.eq_ignore_ascii_case(OPENMETRICS))
        {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// Lenient skips and counts bad lines (the scrape path); strict stops at the first.
///
/// A label name given twice on one line makes the line bad in both modes: which value
/// was meant is a guess, Prometheus rejects such a sample ("label name is not unique")
/// and prometheus_client's parser rejects the line. So a sample never holds a name twice
/// (`parse` never prints a JSON object with a repeated key, and the mapping never picks
/// one of two `model_name`s).
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
    /// Why the first skipped line was skipped (lenient mode), for a log line.
    pub first_skipped: Option<ParseError>,
}

/// Where and why a page is not valid.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parse a page.
pub fn parse(text: &str, format: Format, mode: Mode) -> Result<Page<'_>, ParseError> {
    let om = format == Format::OpenMetrics;
    match mode {
        Mode::Lenient => Ok(parse_lenient(text, om)),
        Mode::Strict => parse_strict(text, om),
    }
}

/// Iterates lines (without `\n`), with their 1-based numbers.
///
/// Newlines are found 64 bytes at a time into a bit mask (the fixed-size compare loop
/// compiles to a few vector instructions), so a line costs a few instructions instead
/// of a `memchr` call each.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
    number: usize,
    /// Newlines not yet returned in the block at `mask_base`, one bit per byte.
    mask: u64,
    mask_base: usize,
    /// Start of the next block to look at.
    block: usize,
}

const BLOCK: usize = 64;

/// Bit `k` set when `chunk[k]` is a newline.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn newline_mask(chunk: &[u8; BLOCK]) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    let (blocks, _) = chunk.as_chunks::<16>();
    let mut m = 0u64;
    // SAFETY: SSE2 is enabled at compile time (the cfg above; every x86_64 has it), and
    // each load reads exactly the 16 bytes of one `&[u8; 16]` (unaligned load).
    unsafe {
        let nl = _mm_set1_epi8(b'\n' as i8);
        for (k, b) in blocks.iter().enumerate() {
            let v = _mm_loadu_si128(b.as_ptr().cast::<__m128i>());
            let bits = _mm_movemask_epi8(_mm_cmpeq_epi8(v, nl)) as u32 as u64;
            m |= bits << (16 * k);
        }
    }
    m
}

/// Bit `k` set when `chunk[k]` is a newline.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn newline_mask(chunk: &[u8; BLOCK]) -> u64 {
    let mut m = 0u64;
    for (k, &c) in chunk.iter().enumerate() {
        m |= ((c == b'\n') as u64) << k;
    }
    m
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Lines {
            text,
            pos: 0,
            number: 0,
            mask: 0,
            mask_base: 0,
            block: 0,
        }
    }
}

impl Lines<'_> {
    /// The next line as byte offsets `start..end` (without its `\n`).
    #[inline(always)]
    fn span(&mut self) -> Option<(usize, usize)> {
        let len = self.text.len();
        loop {
            if self.mask != 0 {
                let nl = self.mask_base + self.mask.trailing_zeros() as usize;
                self.mask &= self.mask - 1;
                let start = self.pos;
                self.pos = nl + 1;
                self.number += 1;
                return Some((start, nl));
            }
            if self.block >= len {
                // No newline left: the rest (if any) is the last line.
                if self.pos >= len {
                    return None;
                }
                let start = self.pos;
                self.pos = len;
                self.number += 1;
                return Some((start, len));
            }
            let bytes = self.text.as_bytes();
            self.mask_base = self.block;
            self.mask = match bytes
                .get(self.block..self.block + BLOCK)
                .and_then(|c| <&[u8; BLOCK]>::try_from(c).ok())
            {
                Some(chunk) => newline_mask(chunk),
                None => bytes
                    .get(self.block..)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .fold(0, |m, (k, &c)| m | (((c == b'\n') as u64) << k)),
            };
            self.block += BLOCK;
        }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let (start, end) = self.span()?;
        self.text.get(start..end)
    }
}

fn parse_lenient(text: &str, om: bool) -> Page<'_> {
    // One sample per ~100 bytes on real pages; proportional to the input, so bounded.
    let mut page = Page {
        samples: Vec::with_capacity(text.len() / 100 + 1),
        ..Page::default()
    };
    let mut first: Option<ParseError> = None;
    let mut skipped = 0usize;
    let samples = &mut page.samples;
    lenient_lines::<false>(
        text,
        om,
        |_| true,
        |s| samples.push(s),
        #[cold]
        |n, line, e| {
            skipped += 1;
            if first.is_none() {
                first = Some(match e {
                    Some(e) => error_at(n, line, e.col, &e.msg),
                    None => ParseError {
                        line: n,
                        message: "text after # EOF".into(),
                    },
                });
            }
        },
    );
    page.skipped_lines = skipped;
    page.first_skipped = first;
    page
}

/// Lenient parsing for a consumer that wants only a few metrics: `may_want(line)` is
/// asked about every line that starts with a bare metric name, and `false` skips the
/// line without lexing it (it must answer `true` for every line whose name is wanted;
/// it may answer `true` for more). `each` gets the samples of the remaining lines, so
/// it still filters by `sample.name`. With that contract the result equals filtering
/// [`parse`]'s lenient output. The mapping's fast path: most of a page is never lexed.
pub fn scan<'a>(
    text: &'a str,
    format: Format,
    may_want: impl FnMut(&str) -> bool,
    each: impl FnMut(Sample<'a>),
) {
    let om = format == Format::OpenMetrics;
    lenient_lines::<true>(text, om, may_want, each, |_, _, _| {});
}

/// The lenient line loop. With `FILTER`, a line that starts with a bare name is lexed
/// only when `may_want(line)`. Each lexed line goes to `ok` (a sample) or `bad` (an
/// error; `None`: a line after `# EOF`).
#[inline(always)]
fn lenient_lines<'a, const FILTER: bool>(
    text: &'a str,
    om: bool,
    mut may_want: impl FnMut(&str) -> bool,
    mut ok: impl FnMut(Sample<'a>),
    mut bad: impl FnMut(usize, &'a str, Option<lexer::LexError>),
) {
    let bytes = text.as_bytes();
    let mut lines = Lines::new(text);
    let mut prev_name: &str = "";
    while let Some((start, end)) = lines.span() {
        // Most lines are decided by their first byte: comments, and (filtered) names
        // nobody wants, are skipped before the line is even sliced.
        let first = match bytes.get(start) {
            Some(&c) if start < end => c,
            _ => continue,
        };
        if first == b'#' && !om {
            continue;
        }
        let Some(mut line) = text.get(start..end) else {
            continue;
        };
        if bytes.get(end.wrapping_sub(1)) == Some(&b'\r') {
            line = line.get(..line.len() - 1).unwrap_or_default();
        }
        if FILTER && lexer::starts_name(first) && !may_want(line) {
            continue;
        }
        match line.as_bytes().first() {
            None => continue,
            Some(b'#') => {
                if om && line.trim_end() == "# EOF" {
                    // Whatever follows is not part of the exposition.
                    while let Some(rest) = lines.next() {
                        if !rest.trim().is_empty() {
                            bad(lines.number, rest, None);
                        }
                    }
                    break;
                }
                continue;
            }
            Some(b' ' | b'\t') => {
                line = line.trim_start_matches([' ', '\t']);
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
            }
            Some(_) => {}
        }
        // Two call sites with constant dialects: the lexer is inlined into each and the
        // strict-only branches fold away.
        let lexed = if om {
            lexer::sample_line(
                line,
                Dialect {
                    om: true,
                    strict: false,
                },
                prev_name,
            )
        } else {
            lexer::sample_line(
                line,
                Dialect {
                    om: false,
                    strict: false,
                },
                prev_name,
            )
        };
        match lexed {
            Ok(s) => {
                // Only a bare name (the line's first bytes) was checked character by character.
                if let Cow::Borrowed(n) = s.sample.name {
                    if n.as_ptr() == line.as_ptr() {
                        prev_name = n;
                    }
                }
                ok(s.sample)
            }
            Err(e) => bad(lines.number, line, Some(e)),
        }
    }
}

fn parse_strict(text: &str, om: bool) -> Result<Page<'_>, ParseError> {
    let d = Dialect { om, strict: true };
    let mut page = Page {
        samples: Vec::with_capacity(text.len() / 100 + 1),
        ..Page::default()
    };
    let mut rules = strict::Rules::new(om);
    let mut lines = Lines::new(text);
    while let Some(line) = lines.next() {
        let n = lines.number;
        let plain = |msg: Cow<'static, str>| ParseError {
            line: n,
            message: msg.into_owned(),
        };
        if rules.seen_eof() {
            return Err(plain("text after # EOF".into()));
        }
        if let Some(col) = memchr::memchr(b'\r', line.as_bytes()) {
            return Err(error_at(
                n,
                line,
                col,
                "carriage return (lines must end with \\n only, not CRLF)",
            ));
        }
        let body = if om {
            line
        } else {
            line.trim_start_matches([' ', '\t'])
        };
        match body.as_bytes().first() {
            None if om => return Err(plain("blank line (not allowed in OpenMetrics)".into())),
            None => continue,
            Some(b' ' | b'\t') => return Err(error_at(n, line, 0, "line starts with whitespace")),
            Some(b'#') => {
                let c =
                    lexer::comment_line(body, d).map_err(|e| error_at(n, line, e.col, &e.msg))?;
                if om {
                    if let Comment::Help { text, .. } | Comment::Type { kind: text, .. } = &c {
                        if memchr::memchr(b'\n', text.as_bytes()).is_some() {
                            return Err(plain("newline in metadata".into()));
                        }
                    }
                }
                rules.comment(c).map_err(plain)?;
            }
            Some(_) => {
                let s = lexer::sample_line(body, d, "")
                    .map_err(|e| error_at(n, line, e.col, &e.msg))?;
                rules.sample(&s).map_err(plain)?;
                page.samples.push(s.sample);
            }
        }
    }
    rules.finish().map_err(|m| ParseError {
        line: lines.number.max(1),
        message: m.into_owned(),
    })?;
    Ok(page)
}

/// An error message that shows the line (shortened) and the column.
fn error_at(line_no: usize, line: &str, col: usize, msg: &str) -> ParseError {
    let mut shown: String = line.chars().take(80).collect();
    if shown.len() < line.len() {
        shown.push('…');
    }
    ParseError {
        line: line_no,
        message: format!("{msg} (column {}) in {shown:?}", col + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_match_split_at_block_edges() {
        for len in [0usize, 1, 2, 62, 63, 64, 65, 127, 128, 129, 200] {
            for period in [1usize, 2, 7, 63, 64, 65, 1000] {
                for nl_at_end in [false, true] {
                    let mut text: String = (0..len)
                        .map(|i| if (i + 1) % period == 0 { '\n' } else { 'x' })
                        .collect();
                    if nl_at_end {
                        text.push('\n');
                    }
                    let mut want: Vec<&str> = text.split('\n').collect();
                    if text.is_empty() || text.ends_with('\n') {
                        want.pop();
                    }
                    let mut lines = Lines::new(&text);
                    let mut got = Vec::new();
                    while let Some(l) = lines.next() {
                        got.push(l);
                        assert_eq!(lines.number, got.len());
                    }
                    assert_eq!(got, want, "len {len} period {period}");
                }
            }
        }
        let multibyte = "é\n€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€€\nz";
        assert_eq!(
            Lines::new(multibyte).collect::<Vec<_>>(),
            multibyte.split('\n').collect::<Vec<_>>()
        );
    }
}
