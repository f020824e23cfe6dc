//! The time source: a query that names a date ("on 9 July, 2022", "in May 2023",
//! "2023-05-08", "yesterday", "3 days ago") lifts the recalled events told in that window.
//!
//! People tell what happened after it happened ("yesterday I went..."), so the window runs
//! from [`BEFORE_DAYS`] before the named day or month to [`AFTER_DAYS`] after it. The source
//! adds no new candidates: it re-ranks what the other sources found, listing those of their
//! events whose timestamps fall in the window, in fused order, and that list counts
//! [`WEIGHT`] times in the fusion. Relative phrases are read against the newest event the
//! query may see (in a live conversation, its own time), so the same ledger always gives the
//! same answer. A year alone ("in 2022") is too broad to help and is not a window.

use super::{epoch, Cache, Query, Ranked, Via};
use crate::store::EventLog;
use crate::Result;
use chrono::{Datelike, Days, Months, NaiveDate};

/// Days before the named day or month that still count.
pub const BEFORE_DAYS: u64 = 1;
/// Days after the named day or month that still count (an event told up to a week later).
pub const AFTER_DAYS: u64 = 7;
/// How many times the time list counts in the fusion (once would be drowned by the others).
pub const WEIGHT: f64 = 2.0;
/// The most fused events looked at for the window.
pub const LOOKED_AT: usize = 2_000;

/// A span of days the query names: `first` to `last`, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The first day.
    pub first: NaiveDate,
    /// The last day.
    pub last: NaiveDate,
}

impl Window {
    /// The reason shown in `via`: [`Via::When`], written `when:2022-07-09` or
    /// `when:2022-07-01..2022-07-31`.
    pub fn label(&self) -> Via {
        Via::When(self.clone())
    }

    /// Seconds since the epoch of the window's widened bounds: `[from, to)`.
    fn bounds(&self) -> (i64, i64) {
        let from = self.first - Days::new(BEFORE_DAYS);
        let to = self.last + Days::new(AFTER_DAYS + 1);
        let secs = |d: NaiveDate| {
            d.and_hms_opt(0, 0, 0)
                .map_or(0, |t| t.and_utc().timestamp())
        };
        (secs(from), secs(to))
    }
}

/// The events of `fused` (best first) told in the window `q` names, best first, each with the
/// window as its reason; `None` when the query names no window.
pub fn rank<R: EventLog>(
    r: &R,
    q: &Query,
    fused: &[(i64, f64, Vec<Via>)],
    cache: &mut Cache,
) -> Result<Option<Ranked>> {
    let Some(today) = anchor(r, q)? else {
        return Ok(None);
    };
    let Some(w) = window(&q.text, today) else {
        return Ok(None);
    };
    let (from, to) = w.bounds();
    let label = w.label();
    let mut items = Vec::new();
    for (id, _, _) in fused.iter().take(LOOKED_AT) {
        let ts = match cache.get(id) {
            Some(e) => epoch(&e.ts),
            None => match r.get(*id)? {
                Some(e) => {
                    let ts = epoch(&e.ts);
                    cache.insert(*id, e);
                    ts
                }
                None => None,
            },
        };
        if ts.is_some_and(|t| (from..to).contains(&t)) {
            items.push((*id, vec![label.clone()]));
        }
    }
    Ok(Some(Ranked { items }))
}

/// The day relative phrases are read against: that of the newest event the query may see.
fn anchor<R: EventLog>(r: &R, q: &Query) -> Result<Option<NaiveDate>> {
    let Some(head) = r.head()? else {
        return Ok(None);
    };
    let id = head.id.min(q.before - 1);
    Ok(r.get(id)?
        .and_then(|e| epoch(&e.ts))
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map(|t| t.date_naive()))
}

/// The first window `text` names, relative phrases read against `today`.
pub fn window(text: &str, today: NaiveDate) -> Option<Window> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    (0..words.len()).find_map(|i| at(&words[i..], today))
}

/// A window named by the words starting at `w[0]`.
fn at(w: &[String], today: NaiveDate) -> Option<Window> {
    let word = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let day_of = |d: NaiveDate| Some(Window { first: d, last: d });
    // 9 July 2022, 9th of July, 2022
    if let Some(d) = day(word(0)) {
        let m = if word(1) == "of" { 2 } else { 1 };
        if let (Some(mo), Some(y)) = (month(word(m)), year(word(m + 1))) {
            return NaiveDate::from_ymd_opt(y, mo, d).and_then(day_of);
        }
    }
    // July 9, 2022; July 2022
    if let Some(mo) = month(word(0)) {
        if let (Some(d), Some(y)) = (day(word(1)), year(word(2))) {
            return NaiveDate::from_ymd_opt(y, mo, d).and_then(day_of);
        }
        if let Some(y) = year(word(1)) {
            return month_window(y, mo);
        }
    }
    // 2022-07-09 (split into words: 2022 07 09)
    if let (Some(y), Ok(mo), Ok(d)) = (year(word(0)), word(1).parse(), word(2).parse()) {
        if word(1).len() == 2 && word(2).len() == 2 {
            return NaiveDate::from_ymd_opt(y, mo, d).and_then(day_of);
        }
    }
    relative(w, today)
}

/// Today, yesterday, last week, last month, N days (weeks) ago.
fn relative(w: &[String], today: NaiveDate) -> Option<Window> {
    let word = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    let span = |first: NaiveDate, last: NaiveDate| Some(Window { first, last });
    match (word(0), word(1)) {
        ("today", _) => span(today, today),
        ("yesterday", _) => span(today - Days::new(1), today - Days::new(1)),
        ("last", "week") => span(today - Days::new(7), today),
        ("last", "month") => {
            let start = today.with_day(1)? - Months::new(1);
            month_window(start.year(), start.month())
        }
        (n, unit) if word(2) == "ago" => {
            let n: u64 = n.parse().ok().filter(|n| (1..=366).contains(n))?;
            let days = match unit {
                "day" | "days" => n,
                "week" | "weeks" => n * 7,
                _ => return None,
            };
            let d = today - Days::new(days);
            span(d, d)
        }
        _ => None,
    }
}

/// The whole of month `mo` of year `y`.
fn month_window(y: i32, mo: u32) -> Option<Window> {
    let first = NaiveDate::from_ymd_opt(y, mo, 1)?;
    let last = first + Months::new(1) - Days::new(1);
    Some(Window { first, last })
}

/// A day of the month: `9`, `09`, `9th`, `1st`, `22nd`, `3rd`.
fn day(w: &str) -> Option<u32> {
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))
        .unwrap_or(w);
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

/// A four-digit year from 1900 to 2199.
fn year(w: &str) -> Option<i32> {
    if w.len() != 4 || !w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    w.parse().ok().filter(|y| (1900..2200).contains(y))
}

/// An English month name or its usual abbreviation ("may" only ever as the month here: the
/// callers require a day or a year beside it).
fn month(w: &str) -> Option<u32> {
    const NAMES: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let w = if w == "sept" { "sep" } else { w };
    let n = NAMES
        .iter()
        .position(|m| *m == w || (w.len() == 3 && m.starts_with(w)))?;
    Some(n as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    fn w(text: &str) -> Option<(NaiveDate, NaiveDate)> {
        window(text, d(2023, 3, 15)).map(|w| (w.first, w.last))
    }

    #[test]
    fn absolute_days_in_the_usual_spellings() {
        let jul9 = Some((d(2022, 7, 9), d(2022, 7, 9)));
        assert_eq!(w("How did John relax on 9 July, 2022?"), jul9);
        assert_eq!(w("what happened on the 9th of July 2022"), jul9);
        assert_eq!(w("What did he do on July 9, 2022?"), jul9);
        assert_eq!(w("on Jul 9th 2022"), jul9);
        assert_eq!(w("the note of 2022-07-09"), jul9);
    }

    #[test]
    fn months_and_relative_phrases() {
        assert_eq!(w("in May 2023"), Some((d(2023, 5, 1), d(2023, 5, 31))));
        assert_eq!(
            w("during February, 2024"),
            Some((d(2024, 2, 1), d(2024, 2, 29)))
        );
        assert_eq!(
            w("what did I say yesterday"),
            Some((d(2023, 3, 14), d(2023, 3, 14)))
        );
        assert_eq!(w("today"), Some((d(2023, 3, 15), d(2023, 3, 15))));
        assert_eq!(w("last week"), Some((d(2023, 3, 8), d(2023, 3, 15))));
        assert_eq!(w("last month"), Some((d(2023, 2, 1), d(2023, 2, 28))));
        assert_eq!(w("3 days ago"), Some((d(2023, 3, 12), d(2023, 3, 12))));
        assert_eq!(w("2 weeks ago"), Some((d(2023, 3, 1), d(2023, 3, 1))));
    }

    #[test]
    fn no_window_without_a_date() {
        for t in [
            "What did Caroline paint?",
            "may I ask what you did in 2022",
            "in October",
            "1000 days ago",
            "",
            "the 5th",
            "marching bands in 22 2022",
        ] {
            assert_eq!(w(t), None, "{t}");
        }
        // A day the month does not have still names the month.
        assert_eq!(w("31 February 2023"), Some((d(2023, 2, 1), d(2023, 2, 28))));
    }

    #[test]
    fn the_window_is_widened_and_labelled() {
        let win = Window {
            first: d(2022, 7, 9),
            last: d(2022, 7, 9),
        };
        assert_eq!(win.label().to_string(), "when:2022-07-09");
        let (from, to) = win.bounds();
        assert_eq!(to - from, (1 + 1 + 7) * 86_400);
        let month = month_window(2022, 7).unwrap();
        assert_eq!(month.label().to_string(), "when:2022-07-01..2022-07-31");
    }
}
