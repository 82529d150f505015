//! Byte-level lexing of one line: a sample line or a `#` line.
//!
//! Works on a line already split off (no `\n`). One pass, no allocation on the common
//! path: names and label text are borrowed, numbers converted in place. Every byte index
//! is checked (`get`), so malformed input can only produce an error, never a panic.
//! `Dialect` carries the differences: OpenMetrics strict wants single spaces and no
//! trailing comma; Prometheus strict wants the three label escapes only.

use std::borrow::Cow;

use super::names::{Name, NameSet};
use super::number::{parse_f64, parse_i64, parse_om_timestamp, short_decimal};
use super::sample::{closing_quote, quoted_end, unescape, Labels, Sample};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Dialect {
    pub om: bool,
    pub strict: bool,
}

impl Dialect {
    /// Spaces and tabs allowed between tokens (everything but OpenMetrics strict).
    #[inline]
    fn lax_spacing(self) -> bool {
        !(self.om && self.strict)
    }
}

/// A lexing failure: byte column (0-based) in the line and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LexError {
    pub col: usize,
    pub msg: Cow<'static, str>,
}

fn err<T>(col: usize, msg: &'static str) -> Result<T, LexError> {
    Err(LexError {
        col,
        msg: Cow::Borrowed(msg),
    })
}

const NAME_START: u8 = 1;
const NAME: u8 = 2;
const LABEL_START: u8 = 4;
const LABEL: u8 = 8;

/// Character classes of the legacy name grammars (`[a-zA-Z_:][a-zA-Z0-9_:]*` for
/// metric names, `[a-zA-Z_][a-zA-Z0-9_]*` for label names).
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let alpha = b.is_ascii_alphabetic() || b == b'_';
        let digit = b.is_ascii_digit();
        if alpha || b == b':' {
            t[c] |= NAME_START | NAME;
        }
        if digit {
            t[c] |= NAME | LABEL;
        }
        if alpha {
            t[c] |= LABEL_START | LABEL;
        }
        c += 1;
    }
    t
};

#[inline]
fn class(b: &[u8], i: usize) -> u8 {
    match b.get(i) {
        Some(&c) => CLASS[c as usize],
        None => 0,
    }
}

#[inline]
fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

/// End of a token: the next space or tab (or the end of the line).
#[inline]
fn token_end(b: &[u8], i: usize) -> usize {
    match b.get(i..) {
        Some(rest) => {
            i + rest
                .iter()
                .position(|&c| c == b' ' || c == b'\t')
                .unwrap_or(rest.len())
        }
        None => i,
    }
}

/// End of a run of bytes of class `mask` starting at `i`.
#[inline(always)]
fn run_end(b: &[u8], mut i: usize, mask: u8) -> usize {
    // Names are tens of bytes: eight table lookups per branch, then byte by byte.
    while let Some(chunk) = b.get(i..i + 8) {
        if chunk.iter().fold(mask, |m, &c| m & CLASS[c as usize]) == 0 {
            break;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if CLASS[c as usize] & mask == 0 {
            break;
        }
        i += 1;
    }
    i
}

/// Whether a line starting with `c` starts with a bare metric name.
#[inline]
pub(crate) fn starts_name(c: u8) -> bool {
    CLASS[c as usize] & NAME_START != 0
}

/// Whether a metric name matches the legacy grammar.
pub(crate) fn is_metric_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && class(b, 0) & NAME_START != 0
        && b.iter().all(|&c| CLASS[c as usize] & NAME != 0)
}

/// A sample line with what the strict rules need beyond the sample.
#[derive(Debug)]
pub(crate) struct LineSample<'a> {
    pub sample: Sample<'a>,
    /// The timestamp as written, in seconds for OpenMetrics and ms for Prometheus.
    pub ts_raw: Option<f64>,
    /// An OpenMetrics exemplar followed the sample (strict mode checks its placement).
    pub exemplar: bool,
}

/// What a label block held.
struct LabelBlock<'a> {
    /// Index just after `}`.
    end: usize,
    labels: Labels<'a>,
    /// A quoted metric name inside the braces (`{"my.metric", a="b"}`).
    name: Option<Cow<'a, str>>,
}

/// Lex one sample line.
///
/// `prev_name` is the previous line's (valid, bare) metric name or `""`: pages list a
/// metric's samples one after another, and a line that starts with the same name needs
/// no second look at its characters.
#[inline(always)]
pub(crate) fn sample_line<'a>(
    line: &'a str,
    d: Dialect,
    prev_name: &str,
) -> Result<LineSample<'a>, LexError> {
    let b = line.as_bytes();
    let lax = d.lax_spacing();
    let mut i = 0;
    let mut name: Option<Cow<'a, str>> = None;
    if class(b, 0) & NAME_START != 0 {
        let p = prev_name.len();
        i = if p > 0 && b.starts_with(prev_name.as_bytes()) && class(b, p) & NAME == 0 {
            p
        } else {
            run_end(b, 1, NAME)
        };
        name = Some(Cow::Borrowed(line.get(..i).unwrap_or_default()));
        // `name {labels}` is allowed in Prometheus; blanks before the value are not eaten here.
        if lax {
            let j = skip_blanks(b, i);
            if b.get(j) == Some(&b'{') {
                i = j;
            }
        }
    } else if b.first() != Some(&b'{') {
        return err(0, "expected a metric name");
    }
    let mut labels = Labels::default();
    if b.get(i) == Some(&b'{') {
        let block = label_block(line, i + 1, d, name.is_none())?;
        i = block.end;
        labels = block.labels;
        if let Some(n) = block.name {
            name = Some(n);
        }
    }
    let Some(name) = name else {
        return err(
            0,
            "metric name not set (expected a name or a quoted name in braces)",
        );
    };

    // Value.
    let value_start = separator(b, i, lax, "expected a space before the value")?;
    let (value, value_end) = match short_decimal(b, value_start) {
        Some(v) => v,
        None => {
            let value_end = token_end(b, value_start);
            let value_text = line.get(value_start..value_end).unwrap_or_default();
            let Some(v) = parse_f64(value_text) else {
                return Err(LexError {
                    col: value_start,
                    msg: Cow::Owned(format!("invalid value {value_text:?}")),
                });
            };
            (v, value_end)
        }
    };
    i = value_end;

    // Optional timestamp, then optional exemplar.
    let mut timestamp_ms = None;
    let mut ts_raw = None;
    let mut exemplar = false;
    if i < b.len() {
        let next = separator(b, i, lax, "expected a space after the value")?;
        if next >= b.len() {
            if lax {
                return Ok(done(name, labels, value, None, None, false));
            }
            return err(i, "trailing whitespace");
        }
        if b.get(next) != Some(&b'#') {
            let ts_end = token_end(b, next);
            let ts_text = line.get(next..ts_end).unwrap_or_default();
            let (parsed, expected) = if d.om {
                (parse_om_timestamp(ts_text), "float seconds")
            } else {
                let ms = parse_i64(ts_text);
                (ms.map(|ms| (ms as f64, ms)), "int64 milliseconds")
            };
            let Some((raw, ms)) = parsed else {
                return Err(LexError {
                    col: next,
                    msg: Cow::Owned(format!(
                        "invalid timestamp {ts_text:?} ({expected} expected)"
                    )),
                });
            };
            timestamp_ms = Some(ms);
            ts_raw = Some(raw);
            i = ts_end;
            if i < b.len() {
                let next = separator(b, i, lax, "expected a space after the timestamp")?;
                if next >= b.len() {
                    if lax {
                        return Ok(done(name, labels, value, timestamp_ms, ts_raw, false));
                    }
                    return err(i, "trailing whitespace");
                }
                if b.get(next) != Some(&b'#') {
                    return err(next, "unexpected text after the timestamp");
                }
                i = next;
            }
        } else {
            i = next;
        }
        if i < b.len() {
            // `# {labels} value [timestamp]`
            if !d.strict {
                // The scrape path only needs the sample; a malformed exemplar does not
                // make its value wrong.
                return Ok(done(name, labels, value, timestamp_ms, ts_raw, false));
            }
            if !d.om {
                return err(i, "exemplars are OpenMetrics only");
            }
            exemplar_tail(line, i)?;
            exemplar = true;
        }
    }
    Ok(done(name, labels, value, timestamp_ms, ts_raw, exemplar))
}

#[inline]
fn done<'a>(
    name: Cow<'a, str>,
    labels: Labels<'a>,
    value: f64,
    timestamp_ms: Option<i64>,
    ts_raw: Option<f64>,
    exemplar: bool,
) -> LineSample<'a> {
    LineSample {
        sample: Sample {
            name,
            labels,
            value,
            timestamp_ms,
        },
        ts_raw,
        exemplar,
    }
}

/// The whitespace between two tokens: one space in OpenMetrics strict, else spaces/tabs.
#[inline]
fn separator(b: &[u8], i: usize, lax: bool, msg: &'static str) -> Result<usize, LexError> {
    if lax {
        let j = skip_blanks(b, i);
        if j == i {
            return err(i, msg);
        }
        Ok(j)
    } else if b.get(i) == Some(&b' ') {
        if b.get(i + 1) == Some(&b' ') {
            return err(i + 1, "more than one space");
        }
        Ok(i + 1)
    } else {
        err(i, msg)
    }
}

/// An OpenMetrics exemplar starting at `i` (on the `#`): ` # {labels} value [ts]`.
fn exemplar_tail(line: &str, i: usize) -> Result<(), LexError> {
    let b = line.as_bytes();
    if b.get(i + 1) != Some(&b' ') || b.get(i + 2) != Some(&b'{') {
        return err(i, "malformed exemplar (expected \" # {labels} value\")");
    }
    let d = Dialect {
        om: true,
        strict: true,
    };
    let block = label_block(line, i + 3, d, false)?;
    let labels = block.labels;
    let runes: usize = labels
        .iter()
        .map(|(n, v)| n.chars().count() + v.chars().count())
        .sum();
    if runes > 128 {
        return err(i, "exemplar labels longer than 128 characters");
    }
    let vs = separator(
        b,
        block.end,
        false,
        "expected a space before the exemplar value",
    )?;
    let ve = token_end(b, vs);
    if parse_f64(line.get(vs..ve).unwrap_or_default()).is_none() {
        return err(vs, "invalid exemplar value");
    }
    if ve < b.len() {
        let ts = separator(
            b,
            ve,
            false,
            "expected a space before the exemplar timestamp",
        )?;
        let te = token_end(b, ts);
        if te != b.len() {
            return err(te, "unexpected text after the exemplar");
        }
        if parse_om_timestamp(line.get(ts..te).unwrap_or_default()).is_none() {
            return err(ts, "invalid exemplar timestamp");
        }
    }
    Ok(())
}

/// Lex a label block whose `{` is just before `start`.
#[inline(always)]
fn label_block<'a>(
    line: &'a str,
    start: usize,
    d: Dialect,
    name_allowed: bool,
) -> Result<LabelBlock<'a>, LexError> {
    let b = line.as_bytes();
    if !d.strict {
        if let Some((end, escaped)) = plain_label_block(b, start) {
            return Ok(LabelBlock {
                end,
                labels: Labels::new(line.get(start..end - 1).unwrap_or_default(), escaped),
                name: None,
            });
        }
    }
    let lax = d.lax_spacing();
    let mut i = start;
    let mut raw_start = start;
    let mut escaped = false;
    let mut name = None;
    let mut count = 0usize;
    let mut after_comma = false;
    // Names seen so far, for the duplicate check.
    let mut seen = NameSet::default();
    loop {
        if lax {
            i = skip_blanks(b, i);
        }
        match b.get(i) {
            Some(b'}') => {
                if after_comma && d.om && d.strict {
                    return err(i, "trailing comma in label set");
                }
                let raw = line.get(raw_start..i).unwrap_or_default();
                return Ok(LabelBlock {
                    end: i + 1,
                    labels: Labels::new(raw, escaped),
                    name,
                });
            }
            None => return err(i, "unterminated label set (missing '}')"),
            _ => {}
        }
        if count > 0 && !after_comma && d.strict {
            return err(i, "expected ',' or '}' after a label");
        }
        // Label name, bare or quoted.
        let name_start = i;
        let label_name: &str;
        let mut name_escaped = false;
        let quoted = b.get(i) == Some(&b'"');
        if quoted {
            if d.om && d.strict {
                return err(i, "quoted names are not OpenMetrics 1.0");
            }
            let close = i
                + 1
                + closing_quote(b.get(i + 1..).unwrap_or_default()).ok_or(LexError {
                    col: i,
                    msg: Cow::Borrowed("unterminated quoted name"),
                })?;
            let inner = line.get(i + 1..close).unwrap_or_default();
            if inner.contains('\\') {
                if d.strict && !d.om {
                    check_escapes(inner, i + 1)?;
                }
                escaped = true;
                name_escaped = true;
            }
            label_name = inner;
            i = close + 1;
            if lax {
                i = skip_blanks(b, i);
            }
            if matches!(b.get(i), Some(b',' | b'}')) {
                // A quoted string without `=`: the metric name, first in the braces.
                if !name_allowed || count > 0 || name.is_some() {
                    return err(name_start, "quoted metric name in the wrong place");
                }
                if inner.is_empty() {
                    return err(name_start, "empty metric name");
                }
                name = Some(unescape(inner));
                if b.get(i) == Some(&b',') {
                    i += 1;
                }
                raw_start = i;
                after_comma = false;
                // The name does not count as a label: `{"m",}` is `{"m"}`.
                continue;
            }
        } else {
            if class(b, i) & LABEL_START == 0 {
                return err(i, "expected a label name");
            }
            i = run_end(b, i + 1, LABEL);
            label_name = line.get(name_start..i).unwrap_or_default();
            if lax {
                i = skip_blanks(b, i);
            }
        }
        if b.get(i) != Some(&b'=') {
            return err(i, "expected '=' after the label name");
        }
        i += 1;
        if lax {
            i = skip_blanks(b, i);
        }
        if b.get(i) != Some(&b'"') {
            return err(i, "expected '\"' to open the label value");
        }
        let vstart = i + 1;
        let Some((len, has_escape)) = quoted_end(b.get(vstart..).unwrap_or_default()) else {
            return err(i, "unterminated label value");
        };
        i = vstart + len + 1;
        if has_escape {
            let value = line.get(vstart..vstart + len).unwrap_or_default();
            escaped = true;
            if d.strict && !d.om {
                check_escapes(value, vstart)?;
            }
        }
        if d.strict && label_name == "__name__" {
            return err(name_start, "label name \"__name__\" is reserved");
        }
        // In both modes: which of two values is meant is a guess (Prometheus rejects
        // such a sample, prometheus_client's parser the line), so the line is bad.
        if !seen.insert(Name::new(label_name, name_escaped)) {
            return Err(LexError {
                col: name_start,
                msg: Cow::Owned(format!("duplicate label name {label_name:?}")),
            });
        }
        count += 1;
        if lax {
            i = skip_blanks(b, i);
        }
        after_comma = false;
        if b.get(i) == Some(&b',') {
            i += 1;
            after_comma = true;
            if d.strict && lax_double_comma(b, i, lax) {
                return err(i, "empty label (two commas)");
            }
        }
    }
}

/// The common label block, `name="value",...}` without blanks or quoted names: its end
/// (after `}`) and whether a value holds a backslash. `None` for anything else (a
/// repeated label name too), which [`label_block`] then lexes from the start (so both
/// agree by construction).
#[inline(always)]
fn plain_label_block(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut i = start;
    let mut escaped = false;
    // One bit per name, from a cheap hash: a repeated name finds its bit already set.
    // So can two different names (rarely, or on lines with dozens of labels): either
    // way the full lexer, with its exact name set, decides.
    let mut name_bits = 0u64;
    loop {
        let c = *b.get(i)?;
        if c == b'}' {
            return Some((i + 1, escaped));
        }
        if CLASS[c as usize] & LABEL_START == 0 {
            return None;
        }
        let name_start = i;
        i = run_end(b, i + 1, LABEL);
        let bit = name_bit(c, *b.get(i - 1)?, i - name_start);
        if name_bits & bit != 0 {
            return None;
        }
        name_bits |= bit;
        if b.get(i..i + 2) != Some(b"=\"") {
            return None;
        }
        let vstart = i + 2;
        let (len, has_escape) = quoted_end(b.get(vstart..)?)?;
        escaped |= has_escape;
        i = vstart + len + 1;
        match b.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {}
            _ => return None,
        }
    }
}

/// A bit for a label name, from its first and last bytes and its length (a few
/// additions: this runs for every label the scrape path reads).
#[inline(always)]
fn name_bit(first: u8, last: u8, len: usize) -> u64 {
    let h = (first as usize) * 3 + (last as usize) + len * 7;
    1 << (h & 63)
}

fn lax_double_comma(b: &[u8], i: usize, lax: bool) -> bool {
    let j = if lax { skip_blanks(b, i) } else { i };
    b.get(j) == Some(&b',')
}

/// Prometheus 0.0.4 allows `\\`, `\"` and `\n` only.
fn check_escapes(s: &str, col: usize) -> Result<(), LexError> {
    let msg = "invalid escape sequence (only \\\\, \\\" and \\n are allowed)";
    check_escapes_of(s, col, b"\\\"n", msg)
}

/// An error at the first backslash in `s` (at `col` in the line) not followed by one of
/// `allowed`.
fn check_escapes_of(
    s: &str,
    col: usize,
    allowed: &[u8],
    msg: &'static str,
) -> Result<(), LexError> {
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'\\', b.get(i..).unwrap_or_default()) {
        let at = i + off;
        if !b.get(at + 1).is_some_and(|c| allowed.contains(c)) {
            return err(col + at, msg);
        }
        i = at + 2;
    }
    Ok(())
}

/// A `#` line.
#[derive(Debug, PartialEq)]
pub(crate) enum Comment<'a> {
    Help {
        name: Cow<'a, str>,
        text: &'a str,
    },
    Type {
        name: Cow<'a, str>,
        kind: &'a str,
    },
    Unit {
        name: Cow<'a, str>,
        unit: &'a str,
    },
    Eof,
    /// Any other comment (Prometheus only; OpenMetrics has none).
    Other,
}

/// Lex a line starting with `#` (strict modes only: the lenient path skips comments).
pub(crate) fn comment_line(line: &str, d: Dialect) -> Result<Comment<'_>, LexError> {
    let b = line.as_bytes();
    if d.om {
        if line == "# EOF" {
            return Ok(Comment::Eof);
        }
        let kw = line.get(2..6).unwrap_or_default();
        if b.get(1) != Some(&b' ')
            || b.get(6) != Some(&b' ')
            || !matches!(kw, "HELP" | "TYPE" | "UNIT")
        {
            if line.starts_with("# EOF") {
                return err(5, "text after # EOF");
            }
            return err(
                0,
                "a '#' line must be '# HELP', '# TYPE', '# UNIT' or '# EOF' in OpenMetrics",
            );
        }
        let ns = 7;
        if class(b, ns) & NAME_START == 0 {
            return err(ns, "expected a metric name");
        }
        let ne = run_end(b, ns + 1, NAME);
        let name = Cow::Borrowed(line.get(ns..ne).unwrap_or_default());
        if b.get(ne) != Some(&b' ') {
            return err(ne, "expected a space after the metric name");
        }
        let rest = line.get(ne + 1..).unwrap_or_default();
        return match kw {
            "HELP" => Ok(Comment::Help { name, text: rest }),
            "TYPE" => Ok(Comment::Type { name, kind: rest }),
            _ => {
                if !rest.bytes().all(|c| CLASS[c as usize] & NAME != 0) {
                    return err(ne + 1, "invalid unit");
                }
                Ok(Comment::Unit { name, unit: rest })
            }
        };
    }
    // Prometheus: `#` [blanks] HELP|TYPE blanks name [blanks rest]; anything else is a comment.
    let i = skip_blanks(b, 1);
    let kw = line.get(i..i + 4).unwrap_or_default();
    if !matches!(kw, "HELP" | "TYPE") || !matches!(b.get(i + 4), Some(b' ' | b'\t') | None) {
        return Ok(Comment::Other);
    }
    let ns = skip_blanks(b, i + 4);
    let (name, ne): (Cow<'_, str>, usize) = if b.get(ns) == Some(&b'"') {
        let Some(len) = closing_quote(b.get(ns + 1..).unwrap_or_default()) else {
            return err(ns, "unterminated quoted metric name");
        };
        let inner = line.get(ns + 1..ns + 1 + len).unwrap_or_default();
        check_escapes(inner, ns + 1)?;
        (unescape(inner), ns + len + 2)
    } else {
        if class(b, ns) & NAME_START == 0 {
            return err(
                ns,
                if kw == "HELP" {
                    "expected a metric name after HELP"
                } else {
                    "expected a metric name after TYPE"
                },
            );
        }
        let ne = run_end(b, ns + 1, NAME);
        (Cow::Borrowed(line.get(ns..ne).unwrap_or_default()), ne)
    };
    if name.is_empty() {
        return err(ns, "empty metric name");
    }
    if ne < b.len() && !matches!(b.get(ne), Some(b' ' | b'\t')) {
        return err(ne, "invalid character in metric name");
    }
    let rs = skip_blanks(b, ne);
    let rest = line.get(rs..).unwrap_or_default();
    if kw == "HELP" {
        // Only `\\` and `\n` are escapes in Prometheus HELP text.
        let msg = "invalid escape sequence in HELP (only \\\\ and \\n are allowed)";
        check_escapes_of(rest, rs, b"\\n", msg)?;
        Ok(Comment::Help { name, text: rest })
    } else {
        Ok(Comment::Type {
            name,
            kind: rest.trim_end_matches([' ', '\t']),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PL: Dialect = Dialect {
        om: false,
        strict: false,
    };
    const PS: Dialect = Dialect {
        om: false,
        strict: true,
    };
    const OS: Dialect = Dialect {
        om: true,
        strict: true,
    };

    type Lexed = (String, Vec<(String, String)>, f64, Option<i64>);

    fn lex(line: &str, d: Dialect) -> Result<Lexed, String> {
        sample_line(line, d, "")
            .map(|l| {
                (
                    l.sample.name.to_string(),
                    l.sample.labels.to_vec(),
                    l.sample.value,
                    l.sample.timestamp_ms,
                )
            })
            .map_err(|e| e.msg.into_owned())
    }

    #[test]
    fn plain_lines() {
        let (n, l, v, t) = lex(r#"vllm:x{engine="0",model_name="m"} 1.5e-3 123"#, PS).unwrap();
        assert_eq!(n, "vllm:x");
        assert_eq!(
            l,
            vec![
                ("engine".into(), "0".into()),
                ("model_name".into(), "m".into())
            ]
        );
        assert_eq!(v, 1.5e-3);
        assert_eq!(t, Some(123));
    }

    #[test]
    fn prometheus_spacing_variants() {
        for line in [
            r#"a{ quantile="1.0", a="b" } 1"#,
            r#"a { quantile= "1.0", a= "b", } 1"#,
            r#"a { quantile = "1.0", a = "b" } 1"#,
            "a{quantile=\"1.0\",a=\"b\"}\t1 \t",
        ] {
            let (_, l, v, _) = lex(line, PS).unwrap();
            assert_eq!(l.len(), 2, "{line}");
            assert_eq!(v, 1.0);
        }
    }

    #[test]
    fn quoted_names() {
        let (n, l, _, _) = lex(r#"{"go.gc", quantile="0"} 4"#, PS).unwrap();
        assert_eq!(n, "go.gc");
        assert_eq!(l, vec![("quantile".into(), "0".into())]);
        let (n, l, _, _) = lex(r#"{"a\"b","c.d"="e"} 1"#, PS).unwrap();
        assert_eq!(n, "a\"b");
        assert_eq!(l, vec![("c.d".into(), "e".into())]);
        assert!(lex(r#"{a="ok"} 1"#, PS)
            .unwrap_err()
            .contains("metric name not set"));
        assert!(lex(r#"{"a"} 1"#, OS).is_err());
    }

    #[test]
    fn strict_rejections() {
        for (line, d, want) in [
            ("a", PS, "space before the value"),
            ("a{b='c'} 1", PS, "open the label value"),
            ("a{b=\"c\",b=\"d\"} 1", PS, "duplicate"),
            ("a{b=\"\\q\"} 1", PS, "escape"),
            ("a{=\"\"} 0", PS, "label name"),
            ("foo 1_2", PS, "invalid value"),
            ("foo 0x1p-3", PS, "invalid value"),
            ("foo 0 1_2", PS, "invalid timestamp"),
            ("foo 0 1.5", PS, "invalid timestamp"),
            ("a{b=\"c\",} 1", OS, "trailing comma"),
            ("a{b=\"c\",,d=\"e\"} 1", OS, "two commas"),
            ("a{b=\"c\",,d=\"e\"} 1", PS, "two commas"),
            ("a  1", OS, "more than one space"),
            ("a 1 ", OS, "trailing whitespace"),
            ("a{a=\"1\"b} 1", OS, "expected ',' or '}'"),
            ("a 1 # {a=\"b\"} 1", PS, "OpenMetrics only"),
            ("a 1 #", OS, "malformed exemplar"),
            ("a 1 # {} 1 ", OS, "exemplar"),
            ("a{__name__=\"x\"} 1", PS, "reserved"),
        ] {
            let e = lex(line, d).unwrap_err();
            assert!(e.contains(want), "{line:?}: {e}");
        }
    }

    #[test]
    fn lenient_accepts_what_strict_refuses() {
        assert!(lex("a{b=\"\\q\"} 1", PL).is_ok());
        assert!(lex("a 1 # whatever", PL).is_ok());
        assert!(lex(
            "a{b=\"c\",} 1",
            Dialect {
                om: true,
                strict: false
            }
        )
        .is_ok());
    }

    #[test]
    fn comments() {
        assert_eq!(
            comment_line("# HELP a x\\n", PS).unwrap(),
            Comment::Help {
                name: "a".into(),
                text: "x\\n"
            }
        );
        assert_eq!(
            comment_line("# \tTYPE a summary", PS).unwrap(),
            Comment::Type {
                name: "a".into(),
                kind: "summary"
            }
        );
        assert_eq!(comment_line("# Hrandom", PS).unwrap(), Comment::Other);
        assert!(comment_line("# HELP #", PS).is_err());
        assert!(comment_line("# HELP a \\t", PS).is_err());
        assert_eq!(comment_line("# EOF", OS).unwrap(), Comment::Eof);
        assert!(comment_line("# EOFblah", OS).is_err());
        assert!(comment_line("# FOO a x", OS).is_err());
        assert!(comment_line("# HELP a", OS).is_err());
        assert_eq!(
            comment_line("# HELP a ", OS).unwrap(),
            Comment::Help {
                name: "a".into(),
                text: ""
            }
        );
        assert!(comment_line("# UNIT a_s s ", OS).is_err());
    }
}
