//! Scripted gauge values: a gauge overridden with a waveform reports the waveform's
//! value at the time of the scrape instead of what the engine measured.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A value as a function of the time since the override was set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Waveform {
    Constant {
        value: f64,
    },
    /// Linear from `from` to `to` over `period_ms`, then starts again.
    Ramp {
        from: f64,
        to: f64,
        period_ms: u64,
    },
    /// Sine between `min` and `max`, starting at the midpoint going up.
    Oscillate {
        min: f64,
        max: f64,
        period_ms: u64,
    },
    /// `low` for the first half of each period, `high` for the second.
    Square {
        low: f64,
        high: f64,
        period_ms: u64,
    },
}

impl Waveform {
    /// The value `elapsed` after the override was set.
    pub fn value_at(&self, elapsed: Duration) -> f64 {
        let phase = |period_ms: u64| {
            let p = period_ms.max(1) as f64;
            (elapsed.as_secs_f64() * 1000.0 % p) / p
        };
        match *self {
            Waveform::Constant { value } => value,
            Waveform::Ramp {
                from,
                to,
                period_ms,
            } => from + (to - from) * phase(period_ms),
            Waveform::Oscillate {
                min,
                max,
                period_ms,
            } => {
                let mid = (min + max) / 2.0;
                mid + (max - min) / 2.0 * (phase(period_ms) * std::f64::consts::TAU).sin()
            }
            Waveform::Square {
                low,
                high,
                period_ms,
            } => {
                if phase(period_ms) < 0.5 {
                    low
                } else {
                    high
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let ms = Duration::from_millis;
        assert_eq!(Waveform::Constant { value: 3.0 }.value_at(ms(99)), 3.0);
        let ramp = Waveform::Ramp {
            from: 0.0,
            to: 10.0,
            period_ms: 100,
        };
        assert!((ramp.value_at(ms(50)) - 5.0).abs() < 1e-9);
        assert!((ramp.value_at(ms(150)) - 5.0).abs() < 1e-9);
        let sq = Waveform::Square {
            low: 1.0,
            high: 2.0,
            period_ms: 100,
        };
        assert_eq!(sq.value_at(ms(10)), 1.0);
        assert_eq!(sq.value_at(ms(60)), 2.0);
        let osc = Waveform::Oscillate {
            min: 0.0,
            max: 1.0,
            period_ms: 100,
        };
        assert!((osc.value_at(ms(25)) - 1.0).abs() < 1e-9);
        assert!((osc.value_at(ms(75)) - 0.0).abs() < 1e-9);
    }

    #[test]
    fn serde_shape() {
        let w: Waveform =
            serde_json::from_str(r#"{"kind":"square","low":0,"high":5,"period_ms":1000}"#).unwrap();
        assert_eq!(
            w,
            Waveform::Square {
                low: 0.0,
                high: 5.0,
                period_ms: 1000
            }
        );
    }
}
