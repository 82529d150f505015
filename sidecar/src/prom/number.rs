//! Numbers of the text formats: sample values, timestamps, `le`/`quantile` labels.
//!
//! The grammar is checked here, byte by byte, so that both formats reject what their
//! references reject (`1_2`, `0x1p-3`, `+NaN`) even where Rust's `f64::from_str` would
//! accept. The conversion itself takes an exact fast path (Clinger's: a mantissa of at
//! most 2^53 times a power of ten of at most 10^22 is one correctly rounded IEEE
//! operation) and falls back to `f64::from_str` for everything else, so every result is
//! bit-identical to std's.

/// Exact powers of ten representable in an f64.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Largest mantissa for which the fast path is exact.
const MAX_EXACT: u64 = 1 << 53;

/// Parse a float: `[+-]digits[.digits][(e|E)[+-]digits]` (at least one digit before the
/// exponent; `5.` and `.5` allowed), or a case-insensitive `[+-]inf`, `[+-]infinity`,
/// `nan` (no sign on NaN, as in Go's `ParseFloat` and the OpenMetrics ABNF).
#[inline]
pub(crate) fn parse_f64(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    let neg = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        Some(_) => false,
        None => return None,
    };
    // Leading zeros carry no information; after them at most 19 digits fit a u64.
    let first = i;
    while b.get(i) == Some(&b'0') {
        i += 1;
    }
    let mut any = i > first;
    let int_start = i;
    let (mut mant, end) = fold_digits(b, i, 0);
    i = end;
    let mut ndigits = i - int_start;
    any |= ndigits > 0;
    // `17`, `17.0`: how prometheus_client writes whole numbers, most of a vLLM page.
    if any && ndigits <= 15 {
        let whole = matches!(b.get(i..), Some([] | [b'.', b'0']));
        if whole {
            let v = mant as f64;
            return Some(if neg { -v } else { v });
        }
    }
    let mut exp: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let frac_start = i;
        (mant, i) = fold_digits(b, i, mant);
        let nfrac = i - frac_start;
        any |= nfrac > 0;
        ndigits += nfrac;
        exp = -(nfrac as i64);
    }
    if !any {
        return special(b, neg);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let eneg;
        (eneg, i) = exp_sign(b, i + 1);
        let mut e: i64 = 0;
        let mut edigits = false;
        while let Some(&c) = b.get(i) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            edigits = true;
            if e < 100_000 {
                e = e * 10 + d as i64;
            }
            i += 1;
        }
        if !edigits {
            return None;
        }
        exp += if eneg { -e } else { e };
    }
    if i != b.len() {
        return None;
    }
    if ndigits <= 19 && mant <= MAX_EXACT && (-22..=22).contains(&exp) {
        let m = mant as f64;
        let v = if exp >= 0 {
            m * POW10[exp as usize]
        } else {
            m / POW10[(-exp) as usize]
        };
        return Some(if neg { -v } else { v });
    }
    // Grammar already checked: std only converts.
    s.parse::<f64>().ok()
}

/// The value token starting at `start` when it is a short plain decimal (`17`, `6.0`,
/// `0.25`, `1.771042457421372e+09`: digits, an optional fraction, an optional exponent
/// of at most 3 digits, a mantissa of at most 2^53) ending at a blank or the line's end:
/// the value and the token's end. Exact by the same argument as [`parse_f64`]'s fast
/// path (at most 19 digits, so the mantissa cannot overflow before the check).
/// `None` for everything else, which `parse_f64` then handles.
#[inline(always)]
pub(crate) fn short_decimal(b: &[u8], start: usize) -> Option<(f64, usize)> {
    let (mut mant, mut i) = fold_digits(b, start, 0);
    let nint = i - start;
    if nint == 0 || nint > 19 {
        return None;
    }
    let mut exp: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let fs = i;
        (mant, i) = fold_digits(b, i, mant);
        let nfrac = i - fs;
        if nint + nfrac > 19 {
            return None;
        }
        exp = -(nfrac as i64);
    }
    if let Some(b'e' | b'E') = b.get(i) {
        let neg;
        (neg, i) = exp_sign(b, i + 1);
        let es = i;
        let mut e: i64 = 0;
        while let Some(&c) = b.get(i) {
            let d = c.wrapping_sub(b'0');
            if d > 9 || i - es >= 3 {
                break;
            }
            e = e * 10 + d as i64;
            i += 1;
        }
        if i == es {
            return None;
        }
        exp += if neg { -e } else { e };
    }
    if !matches!(b.get(i), None | Some(b' ' | b'\t')) || mant > MAX_EXACT {
        return None;
    }
    let m = mant as f64;
    let v = if exp >= 0 {
        m * *POW10.get(exp as usize)?
    } else {
        m / *POW10.get(exp.unsigned_abs() as usize)?
    };
    Some((v, i))
}

/// The decimal digits from `i` on, folded into `mant`: the new mantissa and the index
/// after the last digit. Wrapping: callers bound the digit count before trusting it.
#[inline(always)]
fn fold_digits(b: &[u8], mut i: usize, mut mant: u64) -> (u64, usize) {
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        mant = mant.wrapping_mul(10).wrapping_add(d as u64);
        i += 1;
    }
    (mant, i)
}

/// An optional exponent sign at `i`: whether it is `-`, and the index after it.
#[inline(always)]
fn exp_sign(b: &[u8], i: usize) -> (bool, usize) {
    match b.get(i) {
        Some(b'-') => (true, i + 1),
        Some(b'+') => (false, i + 1),
        _ => (false, i),
    }
}

/// `inf`, `infinity`, `nan` in any case; a sign only on the infinities.
fn special(b: &[u8], neg: bool) -> Option<f64> {
    let signed = matches!(b.first(), Some(b'+' | b'-'));
    let rest = if signed { &b[1..] } else { b };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if !signed && rest.eq_ignore_ascii_case(b"nan") {
        return Some(f64::NAN);
    }
    None
}

/// A Prometheus 0.0.4 timestamp: a decimal int64 of milliseconds, optional sign.
#[inline]
pub(crate) fn parse_i64(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        // Accumulate negatively so that i64::MIN is representable.
        v = v.checked_mul(10)?.checked_sub(d as i64)?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// An OpenMetrics timestamp: float seconds, finite, to integer milliseconds truncated
/// toward zero (as Prometheus does), saturating at the i64 range.
pub(crate) fn parse_om_timestamp(s: &str) -> Option<(f64, i64)> {
    let secs = parse_f64(s)?;
    if !secs.is_finite() {
        return None;
    }
    Some((secs, (secs * 1000.0) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_std_on_decimal_spellings() {
        for s in [
            "0",
            "-0",
            "+0",
            "1",
            "4.0",
            "1.23e-04",
            ".5",
            "5.",
            "1E+10",
            "1e10",
            "0.1",
            "0.3",
            "14.040000000000001",
            "1.372014592e+010",
            "1.77104238234e+09",
            "0.0011764705882353343",
            "9223372036854775808",
            "123456789012345678901234567890",
            "1e-400",
            "1e400",
            "2.2250738585072014e-308",
            "4.9e-324",
            "00001.2e-1",
            "0.000000000000000000000000000001",
            "1797693134862315708145274237317043567981e269",
            "9007199254740993",
            "9007199254740992",
            "1.7976931348623157e308",
        ] {
            let ours = parse_f64(s).unwrap_or_else(|| panic!("{s}"));
            let std: f64 = s.parse().unwrap();
            assert_eq!(ours.to_bits(), std.to_bits(), "{s}");
        }
    }

    #[test]
    fn short_decimals_equal_std() {
        for s in [
            "6.0",
            "0.0",
            "17",
            "5.",
            "1733.0",
            "0.25",
            "1.771042457421372e+09",
            "1e22",
            "1e-22",
            "123456789012345",
            "1.5E-3",
            "999999999999999e22",
            "1e022",
        ] {
            let (v, end) = short_decimal(s.as_bytes(), 0).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(end, s.len(), "{s}");
            assert_eq!(v.to_bits(), s.parse::<f64>().unwrap().to_bits(), "{s}");
        }
        // Left to parse_f64: signs, leading dot, too many digits, big exponents, junk.
        for s in [
            "-1",
            "+1",
            ".5",
            "9007199254740993",
            "1.23456789012345678",
            "12345678901234567890",
            "1e23",
            "1e-23",
            "1e1234",
            "1e",
            "1.5x",
            "Inf",
            "",
        ] {
            assert_eq!(short_decimal(s.as_bytes(), 0), None, "{s}");
        }
        assert_eq!(short_decimal(b"x 6.0 12", 2), Some((6.0, 5)));
        assert_eq!(short_decimal(b"6.0\t1", 0), Some((6.0, 3)));
    }

    proptest::proptest! {
        #[test]
        fn decimals_equal_std(s in "[0-9]{1,18}(\\.[0-9]{0,18})?([eE][+-]?[0-9]{1,4})?") {
            let std = s.parse::<f64>().unwrap();
            proptest::prop_assert_eq!(parse_f64(&s).map(f64::to_bits), Some(std.to_bits()));
            if let Some((v, end)) = short_decimal(s.as_bytes(), 0) {
                proptest::prop_assert_eq!(end, s.len());
                proptest::prop_assert_eq!(v.to_bits(), std.to_bits());
            }
            let spaced = format!("{s} 1");
            if let Some((v, end)) = short_decimal(spaced.as_bytes(), 0) {
                proptest::prop_assert_eq!(end, s.len());
                proptest::prop_assert_eq!(v.to_bits(), std.to_bits());
            }
        }

        #[test]
        fn any_f64_round_trips(v in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            for s in [format!("{v}"), format!("{v:e}"), format!("{v:E}"), format!("{v:.3}")] {
                let std = s.parse::<f64>().unwrap();
                proptest::prop_assert_eq!(parse_f64(&s).map(f64::to_bits), Some(std.to_bits()), "{}", s);
                if let Some((x, end)) = short_decimal(s.as_bytes(), 0) {
                    proptest::prop_assert_eq!(end, s.len());
                    proptest::prop_assert_eq!(x.to_bits(), std.to_bits(), "{}", s);
                }
            }
        }
    }

    #[test]
    fn specials_follow_the_references() {
        assert_eq!(parse_f64("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64("inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(parse_f64("NaN").unwrap().is_nan());
        assert!(parse_f64("nan").unwrap().is_nan());
        assert_eq!(parse_f64("+NaN"), None);
        assert_eq!(parse_f64("-nan"), None);
        assert_eq!(parse_f64("infin"), None);
    }

    #[test]
    fn rejects_what_the_references_reject() {
        for s in [
            "", "+", "-", ".", "e5", "1e", "1e+", "1_2", "0x1p-3", "0X1", "0b1", "0o1", "1.1.1",
            "1z", "true", " 1", "1 ", "--1", "1e5.5", ".e5",
        ] {
            assert_eq!(parse_f64(s), None, "{s:?}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_i64("123123"), Some(123123));
        assert_eq!(parse_i64("-5"), Some(-5));
        assert_eq!(parse_i64("9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64("9223372036854775808"), None);
        assert_eq!(parse_i64("1.5"), None);
        assert_eq!(parse_i64("-"), None);
        assert_eq!(parse_om_timestamp("1.5e3"), Some((1500.0, 1_500_000)));
        assert_eq!(parse_om_timestamp("NaN"), None);
        assert_eq!(parse_om_timestamp("-Inf"), None);
        assert_eq!(
            parse_om_timestamp("12345678901234567890.1").map(|t| t.1),
            Some(i64::MAX)
        );
    }
}
