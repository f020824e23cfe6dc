//! Durations on the command line (`pmm-tick --every`, `pmm-turn --chat --autonomy`): seconds
//! (`90`, `2.5`) or a humantime duration (`5m`, `250ms`, `1h 30m`), positive, at most 366
//! days.

use std::time::Duration;

/// The longest duration taken: 366 days (a longer period is a typo, and `Duration` has an
/// end).
pub const MAX_SECS: u64 = 366 * 86_400;

/// Why a duration is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum BadDuration {
    /// Zero, a negative or a non-finite number.
    #[error("'{0}' is not a positive duration")]
    NotPositive(String),
    /// Longer than [`MAX_SECS`].
    #[error("'{0}' is out of range (at most 366 days, {MAX_SECS} seconds)")]
    TooLong(String),
    /// Neither seconds nor a duration like `5m`.
    #[error("'{text}': {source}")]
    NotADuration {
        /// The value given.
        text: String,
        /// Why it does not parse.
        source: humantime::DurationError,
    },
}

/// Parses a duration flag's value (clap's `value_parser`).
pub fn parse(s: &str) -> Result<Duration, BadDuration> {
    let d = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > MAX_SECS as f64 => {
            return Err(BadDuration::TooLong(s.to_string()))
        }
        Ok(secs) if secs.is_finite() && secs > 0.0 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(BadDuration::NotPositive(s.to_string())),
        Err(_) => {
            humantime::parse_duration(s.trim()).map_err(|source| BadDuration::NotADuration {
                text: s.to_string(),
                source,
            })?
        }
    };
    if d.is_zero() {
        return Err(BadDuration::NotPositive(s.to_string()));
    }
    if d > Duration::from_secs(MAX_SECS) {
        return Err(BadDuration::TooLong(s.to_string()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["0", "-1", "soon", "0s", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_year_is_taken_and_a_longer_one_is_out_of_range() {
        let year = Duration::from_secs(MAX_SECS);
        assert_eq!(parse("366days"), Ok(year));
        assert_eq!(parse("31622400"), Ok(year));
        for long in ["99999999999999999999", "1e300", "367days", "31622400.5"] {
            assert_eq!(
                parse(long),
                Err(BadDuration::TooLong(long.into())),
                "{long}"
            );
        }
    }
}
