//! encoding/json's scanner, re-implemented: where a JSON value ends, and the error Go
//! reports when it is malformed.
//!
//! Why our own: the gateway reads every request with Go's decoder, which checks the
//! whole first value (syntax, and nesting deeper than 10,000 levels: "exceeded max
//! depth") before it decodes a single field, and words its errors its own way
//! ("invalid character 'b' looking for beginning of object key string"). Scanning first
//! gives the same errors in the same order, and finds the end of each message in a
//! streamed body without building anything: the scanner keeps one byte per open
//! bracket and nothing else.

/// Go's `maxNestingDepth`.
pub const MAX_DEPTH: usize = 10_000;

/// What a scan of a buffer found.
#[derive(Debug, PartialEq)]
pub enum Scan {
    /// The first value ends at this index (exclusive).
    Complete(usize),
    /// The value is cut short: more bytes may complete it.
    Incomplete,
    /// Malformed, in Go's words.
    Error(String),
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum St {
    Value,
    FirstValueOrEnd,
    Key,
    FirstKeyOrEnd,
    Colon,
    After,
}

/// A resumable scanner over a growing buffer: `feed` picks up where it stopped, so a
/// message arriving in many chunks is scanned about once.
#[derive(Debug)]
pub struct Scanner {
    pos: usize,
    st: St,
    /// `{` or `[` per open level.
    stack: Vec<u8>,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            pos: 0,
            st: St::Value,
            stack: Vec::new(),
        }
    }
}

/// One token's outcome: its end, or why it has none yet.
enum Tok {
    End(usize),
    Short,
    Bad(String),
}

impl Scanner {
    /// Scan `buf` (the same buffer, possibly grown, since the last call). `at_eof`: no
    /// more bytes will come, so a number at the very end is complete.
    pub fn feed(&mut self, buf: &[u8], at_eof: bool) -> Scan {
        let n = buf.len();
        while self.pos < n {
            let i = self.pos;
            let c = buf[i];
            if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
                continue;
            }
            let step = match self.st {
                St::Value | St::FirstValueOrEnd => self.value(buf, i, at_eof),
                St::Key | St::FirstKeyOrEnd => self.key(buf, i),
                St::Colon => {
                    if c != b':' {
                        return Scan::Error(bad(c, "after object key"));
                    }
                    self.st = St::Value;
                    Tok::End(i + 1)
                }
                St::After => self.after(c, i),
            };
            match step {
                Tok::End(end) => self.pos = end,
                Tok::Short => return Scan::Incomplete,
                Tok::Bad(e) => return Scan::Error(e),
            }
            if self.st == St::After && self.stack.is_empty() {
                return Scan::Complete(self.pos);
            }
        }
        Scan::Incomplete
    }

    fn value(&mut self, buf: &[u8], i: usize, at_eof: bool) -> Tok {
        let c = buf[i];
        if self.st == St::FirstValueOrEnd && c == b']' {
            self.stack.pop();
            self.st = St::After;
            return Tok::End(i + 1);
        }
        let end = match c {
            b'{' | b'[' => {
                self.stack.push(c);
                if self.stack.len() > MAX_DEPTH {
                    return Tok::Bad(bad(c, "exceeded max depth"));
                }
                self.st = if c == b'{' {
                    St::FirstKeyOrEnd
                } else {
                    St::FirstValueOrEnd
                };
                return Tok::End(i + 1);
            }
            b'"' => string(buf, i),
            b'-' | b'0'..=b'9' => number(buf, i, at_eof),
            b't' => literal(buf, i, b"true"),
            b'f' => literal(buf, i, b"false"),
            b'n' => literal(buf, i, b"null"),
            _ => Tok::Bad(bad(c, "looking for beginning of value")),
        };
        if let Tok::End(_) = end {
            self.st = St::After;
        }
        end
    }

    fn key(&mut self, buf: &[u8], i: usize) -> Tok {
        let c = buf[i];
        if self.st == St::FirstKeyOrEnd && c == b'}' {
            self.stack.pop();
            self.st = St::After;
            return Tok::End(i + 1);
        }
        if c != b'"' {
            return Tok::Bad(bad(c, "looking for beginning of object key string"));
        }
        let end = string(buf, i);
        if let Tok::End(_) = end {
            self.st = St::Colon;
        }
        end
    }

    fn after(&mut self, c: u8, i: usize) -> Tok {
        match (self.stack.last(), c) {
            (Some(b'{'), b',') => self.st = St::Key,
            (Some(b'['), b',') => self.st = St::Value,
            (Some(b'{'), b'}') | (Some(b'['), b']') => {
                self.stack.pop();
            }
            (Some(b'{'), _) => return Tok::Bad(bad(c, "after object key:value pair")),
            (Some(_), _) => return Tok::Bad(bad(c, "after array element")),
            (None, _) => return Tok::Bad(bad(c, "after top-level value")),
        }
        Tok::End(i + 1)
    }
}

/// Scan a whole buffer that holds one message: where its first value ends.
pub fn first_value(body: &[u8]) -> Result<usize, String> {
    match Scanner::default().feed(body, true) {
        Scan::Complete(end) => Ok(end),
        Scan::Incomplete => Err("unexpected EOF".to_string()),
        Scan::Error(e) => Err(e),
    }
}

/// `json.Unmarshal`'s check: exactly one value, nothing but spaces after it.
pub fn check_valid(text: &[u8]) -> Result<(), String> {
    let end = match Scanner::default().feed(text, true) {
        Scan::Complete(end) => end,
        Scan::Incomplete => return Err("unexpected end of JSON input".to_string()),
        Scan::Error(e) => return Err(e),
    };
    match text[end..]
        .iter()
        .find(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        Some(c) => Err(bad(*c, "after top-level value")),
        None => Ok(()),
    }
}

fn string(buf: &[u8], start: usize) -> Tok {
    let mut i = start + 1;
    while i < buf.len() {
        match buf[i] {
            b'"' => return Tok::End(i + 1),
            b'\\' => {
                let Some(&e) = buf.get(i + 1) else {
                    return Tok::Short;
                };
                match e {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' => {
                        for k in 0..4 {
                            match buf.get(i + 2 + k) {
                                None => return Tok::Short,
                                Some(h) if h.is_ascii_hexdigit() => {}
                                Some(h) => {
                                    return Tok::Bad(bad(*h, "in \\u hexadecimal character escape"))
                                }
                            }
                        }
                        i += 6;
                    }
                    _ => return Tok::Bad(bad(e, "in string escape code")),
                }
            }
            c if c < 0x20 => return Tok::Bad(bad(c, "in string literal")),
            _ => i += 1,
        }
    }
    Tok::Short
}

fn number(buf: &[u8], start: usize, at_eof: bool) -> Tok {
    let n = buf.len();
    let digits = |mut j: usize| {
        while j < n && buf[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    // One digit must follow at `j`; `ctx` words the error if another byte does.
    let need_digit = |j: usize, ctx: &str| match buf.get(j) {
        None => Err(Tok::Short),
        Some(d) if d.is_ascii_digit() => Ok(()),
        Some(d) => Err(Tok::Bad(bad(*d, ctx))),
    };
    let mut j = start;
    if buf[j] == b'-' {
        j += 1;
        if let Err(t) = need_digit(j, "in numeric literal") {
            return t;
        }
    }
    j = if buf[j] == b'0' { j + 1 } else { digits(j) };
    if j < n && buf[j] == b'.' {
        j += 1;
        if let Err(t) = need_digit(j, "after decimal point in numeric literal") {
            return t;
        }
        j = digits(j);
    }
    if j < n && matches!(buf[j], b'e' | b'E') {
        j += 1;
        if j < n && matches!(buf[j], b'+' | b'-') {
            j += 1;
        }
        if let Err(t) = need_digit(j, "in exponent of numeric literal") {
            return t;
        }
        j = digits(j);
    }
    if j == n && !at_eof {
        return Tok::Short;
    }
    Tok::End(j)
}

fn literal(buf: &[u8], start: usize, word: &[u8]) -> Tok {
    for (k, w) in word.iter().enumerate() {
        match buf.get(start + k) {
            None => return Tok::Short,
            Some(x) if x == w => {}
            Some(x) => {
                let name = String::from_utf8_lossy(word);
                return Tok::Bad(bad(
                    *x,
                    &format!("in literal {name} (expecting '{}')", *w as char),
                ));
            }
        }
    }
    Tok::End(start + word.len())
}

/// `invalid character C CONTEXT`, with C quoted as Go's `quoteChar` does (a byte is
/// shown as the rune of the same number: 0xff is 'ÿ').
fn bad(c: u8, ctx: &str) -> String {
    format!("invalid character {} {ctx}", quote_char(c))
}

fn quote_char(c: u8) -> String {
    let inner = match c {
        b'\'' => return "'\\''".to_string(),
        b'"' => return "'\"'".to_string(),
        b'\\' => "\\\\".to_string(),
        0x07 => "\\a".to_string(),
        0x08 => "\\b".to_string(),
        0x0c => "\\f".to_string(),
        b'\n' => "\\n".to_string(),
        b'\r' => "\\r".to_string(),
        b'\t' => "\\t".to_string(),
        0x0b => "\\v".to_string(),
        0..=0x1f | 0x7f => format!("\\x{c:02x}"),
        0x80..=0xa0 | 0xad => format!("\\u{c:04x}"),
        _ => char::from(c).to_string(),
    };
    format!("'{inner}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_wording_for_syntax_depth_and_eof() {
        assert_eq!(first_value(br#"{"a":1} x"#), Ok(7));
        assert_eq!(
            first_value(b"{bad").unwrap_err(),
            "invalid character 'b' looking for beginning of object key string"
        );
        assert_eq!(first_value(b"{\"a\":").unwrap_err(), "unexpected EOF");
        assert_eq!(
            first_value(b"\xff").unwrap_err(),
            "invalid character '\u{ff}' looking for beginning of value"
        );
        assert_eq!(
            first_value(br#"{"a":1.}"#).unwrap_err(),
            "invalid character '}' after decimal point in numeric literal"
        );
        let deep = |n: usize| format!("{{\"x\":{}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(first_value(deep(MAX_DEPTH - 1).as_bytes()).is_ok());
        assert_eq!(
            first_value(deep(MAX_DEPTH).as_bytes()).unwrap_err(),
            "invalid character '[' exceeded max depth"
        );
        assert_eq!(
            check_valid(b"1 2").unwrap_err(),
            "invalid character '2' after top-level value"
        );
        assert_eq!(
            check_valid(b"").unwrap_err(),
            "unexpected end of JSON input"
        );
    }

    #[test]
    fn resumes_across_chunks() {
        let msg = br#"{"ID":12345,"x":["a\"b",true,null,{}]}"#;
        for cut in 0..msg.len() {
            let mut s = Scanner::default();
            let mut buf = msg[..cut].to_vec();
            assert_eq!(s.feed(&buf, false), Scan::Incomplete, "cut at {cut}");
            buf.extend_from_slice(&msg[cut..]);
            assert_eq!(
                s.feed(&buf, false),
                Scan::Complete(msg.len()),
                "cut at {cut}"
            );
        }
    }
}
