//! An event on one line, for people reading a terminal (JSON Lines are for programs): the
//! one renderer behind `pmm-graph`'s and `pmm admin`'s text, `pmm-replay --narrate` and the
//! chat's `/events`.

use crate::event::Event;

/// Which line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `[<id>] <kind> | <first line of content, 80 characters>`, the reference CLI's line
    /// (with its line break).
    Reference,
    /// `[<id>] <kind> | <content, 100 characters…> | meta:<meta, 80 characters…>`, line breaks
    /// as spaces (`pmm-replay --narrate`).
    Narrated,
    /// `[<id>] <timestamp to the second> <kind>: <content, 100 characters>`, line breaks as
    /// spaces (the chat).
    Chat,
}

/// `ev` as a line of `style`.
pub fn event(ev: &Event, style: Style) -> String {
    match style {
        Style::Reference => {
            let first = crate::marker::splitlines(&ev.content)
                .into_iter()
                .next()
                .unwrap_or("");
            format!("[{}] {} | {}\n", ev.id, ev.kind, cut(first, 80, ""))
        }
        Style::Narrated => format!(
            "[{}] {} | {} | meta:{}",
            ev.id,
            ev.kind,
            cut(&flat(&ev.content, &['\n', '\r']), 100, "…"),
            cut(&flat(&ev.meta, &['\n', '\r']), 80, "…")
        ),
        Style::Chat => format!(
            "[{}] {} {}: {}",
            ev.id,
            ev.ts.get(..19).unwrap_or(&ev.ts),
            ev.kind,
            flat(&cut(&ev.content, 100, ""), &['\n'])
        ),
    }
}

/// `s` with each of `breaks` as a space.
fn flat(s: &str, breaks: &[char]) -> String {
    s.chars()
        .map(|c| if breaks.contains(&c) { ' ' } else { c })
        .collect()
}

/// The first `n` characters of `s`, and `more` when there were more.
fn cut(s: &str, n: usize, more: &str) -> String {
    if s.chars().count() > n {
        format!("{}{more}", s.chars().take(n).collect::<String>())
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Kind;

    fn ev(content: &str, meta: &str) -> Event {
        Event {
            id: 7,
            ts: "2025-11-24T05:55:41.123456Z".into(),
            kind: Kind::UserMessage,
            content: content.into(),
            meta: meta.into(),
            prev_hash: None,
            hash: None,
        }
    }

    #[test]
    fn each_style_is_the_line_it_was() {
        let e = ev("first line\nsecond", "{\"k\":1}");
        assert_eq!(
            event(&e, Style::Reference),
            "[7] user_message | first line\n"
        );
        assert_eq!(
            event(&e, Style::Narrated),
            "[7] user_message | first line second | meta:{\"k\":1}"
        );
        assert_eq!(
            event(&e, Style::Chat),
            "[7] 2025-11-24T05:55:41 user_message: first line second"
        );
        let long = ev(&"x".repeat(120), "{}");
        assert_eq!(event(&long, Style::Narrated).matches('…').count(), 1);
        assert_eq!(
            event(&long, Style::Chat).len(),
            "[7] 2025-11-24T05:55:41 user_message: ".len() + 100
        );
    }
}
