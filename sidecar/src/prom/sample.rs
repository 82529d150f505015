//! The parser's output: samples that borrow from the page.
//!
//! A sample keeps its label set as the raw, already validated text between the braces.
//! That costs nothing per sample (no Vec, no unescaping) and a consumer that only looks
//! up one or two labels (`model_name`, `le`) scans a few dozen bytes. Iterating yields
//! `Cow::Borrowed` unless the value really contains a backslash escape.

use std::borrow::Cow;
use std::fmt;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample<'a> {
    /// The metric name, unescaped when it was quoted (`{"my.metric"}`).
    pub name: Cow<'a, str>,
    pub labels: Labels<'a>,
    pub value: f64,
    /// Milliseconds since the epoch. OpenMetrics seconds are converted (truncated).
    pub timestamp_ms: Option<i64>,
}

/// A validated label set, kept as its source text.
#[derive(Clone, Copy, Default)]
pub struct Labels<'a> {
    /// Text after `{` (and after a quoted metric name) up to, not including, `}`.
    raw: &'a str,
    /// Some name or value holds a backslash: iteration must unescape.
    escaped: bool,
}

impl<'a> Labels<'a> {
    /// Only the lexer builds these, from text it validated.
    pub(crate) fn new(raw: &'a str, escaped: bool) -> Self {
        Labels { raw, escaped }
    }

    pub fn iter(&self) -> LabelIter<'a> {
        LabelIter {
            rest: self.raw.as_bytes(),
            src: self.raw,
            pos: 0,
            escaped: self.escaped,
        }
    }

    /// The label set's source text between the braces, as validated (escapes kept).
    pub fn raw(&self) -> &'a str {
        self.raw
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// The value of label `name`, unescaped.
    pub fn get(&self, name: &str) -> Option<Cow<'a, str>> {
        self.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Owned copies, in page order: handy for tests and tools.
    pub fn to_vec(&self) -> Vec<(String, String)> {
        self.iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect()
    }
}

impl PartialEq for Labels<'_> {
    /// Same labels in the same order (escapes compared after unescaping).
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &Labels<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);
    type IntoIter = LabelIter<'a>;
    fn into_iter(self) -> LabelIter<'a> {
        self.iter()
    }
}

/// Iterates `(name, value)` pairs of a validated label set.
#[derive(Clone)]
pub struct LabelIter<'a> {
    rest: &'a [u8],
    src: &'a str,
    pos: usize,
    escaped: bool,
}

impl<'a> LabelIter<'a> {
    /// Step over the bytes `skip` accepts.
    #[inline(always)]
    fn skip_while(&mut self, skip: impl Fn(u8) -> bool) {
        while self.rest.get(self.pos).is_some_and(|&c| skip(c)) {
            self.pos += 1;
        }
    }

    /// A quoted string starting at `pos` (on the opening quote).
    fn quoted(&mut self) -> Option<Cow<'a, str>> {
        let start = self.pos + 1;
        let end = start + closing_quote(self.rest.get(start..)?)?;
        self.pos = end + 1;
        let s = self.src.get(start..end)?;
        Some(if self.escaped {
            unescape(s)
        } else {
            Cow::Borrowed(s)
        })
    }
}

impl<'a> Iterator for LabelIter<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        self.skip_while(|c| matches!(c, b' ' | b'\t' | b','));
        let name = match self.rest.get(self.pos)? {
            b'"' => self.quoted()?,
            _ => {
                let start = self.pos;
                self.skip_while(|c| !matches!(c, b'=' | b' ' | b'\t'));
                Cow::Borrowed(self.src.get(start..self.pos)?)
            }
        };
        self.skip_while(|c| matches!(c, b' ' | b'\t'));
        if self.rest.get(self.pos) != Some(&b'=') {
            return None;
        }
        self.pos += 1;
        self.skip_while(|c| matches!(c, b' ' | b'\t'));
        if self.rest.get(self.pos) != Some(&b'"') {
            return None;
        }
        let value = self.quoted()?;
        Some((name, value))
    }
}

/// Index of the first unescaped `"` in `b` (which starts after an opening quote).
#[inline]
pub(crate) fn closing_quote(b: &[u8]) -> Option<usize> {
    quoted_end(b).map(|(i, _)| i)
}

/// Index of the first unescaped `"` in `b`, and whether a backslash came before it.
#[inline(always)]
pub(crate) fn quoted_end(b: &[u8]) -> Option<(usize, bool)> {
    // Label values are short (tens of bytes): eight bytes at a time in a register beats
    // a SIMD search's setup there. A zero byte of `x ^ (c * LO)` marks a `c`; the lowest
    // flagged byte is exact (borrows only run upwards).
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(<[u8; 8]>::try_from(chunk).unwrap_or_default());
        let q = x ^ (LO * b'"' as u64);
        let s = x ^ (LO * b'\\' as u64);
        let hit = ((q.wrapping_sub(LO) & !q) | (s.wrapping_sub(LO) & !s)) & HI;
        if hit != 0 {
            i += (hit.trailing_zeros() / 8) as usize;
            break;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' {
            return Some((i, false));
        }
        if c == b'\\' {
            break;
        }
        i += 1;
    }
    // A backslash: step over escapes until the closing quote.
    let mut escaped = false;
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b.get(i) == Some(&b'"') {
            return Some((i, escaped));
        }
        escaped = true;
        i += 2;
    }
}

/// Undo `\\`, `\"` and `\n`; any other backslash stays as it is (what Prometheus does in
/// its scrape path, and what OpenMetrics' `BS normal-char` means).
pub(crate) fn unescape(s: &str) -> Cow<'_, str> {
    if !s.as_bytes().contains(&b'\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some('n') => out.push('\n'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_plain_and_escaped_labels() {
        let l = Labels::new(r#"a="1", b = "x\"y\\z\nw",c="\q","d.e"="f""#, true);
        let v = l.to_vec();
        assert_eq!(
            v,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x\"y\\z\nw".into()),
                ("c".into(), "\\q".into()),
                ("d.e".into(), "f".into()),
            ]
        );
        assert_eq!(l.get("b").as_deref(), Some("x\"y\\z\nw"));
        assert_eq!(l.get("zz"), None);
        assert_eq!(l.len(), 4);
    }

    #[test]
    fn unescaped_values_are_borrowed() {
        let l = Labels::new(r#"engine="0",model_name="m""#, false);
        assert!(matches!(l.get("model_name"), Some(Cow::Borrowed("m"))));
        assert!(Labels::default().is_empty());
    }

    #[test]
    fn garbage_never_panics() {
        for raw in ["\"", "a", "a=", "a=\"", "a=\"\\", "\"\\", ",,,", "a=\"x\"b"] {
            let _ = Labels::new(raw, true).to_vec();
        }
    }
}
