//! The reference's environment names (docs/reference.md, "Environment"): a user's reference
//! `.env` keeps working. Names whose meaning pmm shares are honoured — `PMM_PROVIDER` fills in
//! `PMM_ADAPTER` here; `PMM_OPENAI_MODEL`/`OPENAI_MODEL`, `PMM_OLLAMA_MODEL` and
//! `OLLAMA_BASE_URL` are read by `llm::Config::from_env` — and any other `PMM_` name a `.env`
//! sets is named in a warning, never silently ignored.

/// The `PMM_` variables pmm reads (or its tests do).
const KNOWN: &[&str] = &[
    "PMM_ADAPTER",
    "PMM_DB",
    "PMM_EMBED_API_KEY",
    "PMM_EMBED_MODEL",
    "PMM_EMBED_PROVIDER",
    "PMM_EMBED_URL",
    "PMM_MAX_LINE",
    "PMM_MODEL",
    "PMM_NOW",
    "PMM_TEST_TICK_PAUSE_MS",
];

/// The reference's names that pmm honours with the same meaning, and what they stand for.
pub const HONOURED: &[(&str, &str)] = &[
    ("PMM_PROVIDER", "PMM_ADAPTER (openai, ollama or dummy)"),
    (
        "PMM_OPENAI_MODEL",
        "the openai adapter's model when PMM_MODEL is unset",
    ),
    (
        "OPENAI_MODEL",
        "the openai adapter's model when PMM_MODEL and PMM_OPENAI_MODEL are unset",
    ),
    (
        "PMM_OLLAMA_MODEL",
        "the ollama adapter's model when PMM_MODEL is unset",
    ),
    ("OLLAMA_BASE_URL", "OLLAMA_HOST when that is unset"),
];

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Applies the reference's names after `.env` is loaded (`from_dotenv`: the names that file
/// set); the warnings to print, one line each.
pub fn apply(from_dotenv: &[String]) -> Vec<String> {
    let mut warnings = Vec::new();
    if let (Some(p), None) = (var("PMM_PROVIDER"), var("PMM_ADAPTER")) {
        let p = p.trim().to_lowercase();
        if matches!(p.as_str(), "openai" | "ollama" | "dummy") {
            std::env::set_var("PMM_ADAPTER", &p);
        } else {
            warnings.push(format!(
                "PMM_PROVIDER={p} is not an adapter pmm has (openai, ollama, dummy); it is ignored"
            ));
        }
    }
    for name in from_dotenv {
        let ours = KNOWN.contains(&name.as_str()) || HONOURED.iter().any(|(n, _)| n == name);
        if name.starts_with("PMM_") && !ours {
            warnings.push(format!(
                ".env sets {name}, which pmm does not use (docs/reference.md lists the names it reads)"
            ));
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_pmm_names_from_dotenv_are_named() {
        let w = apply(&[
            "PMM_DB".into(),
            "PMM_AUTONOMY_INTERVAL".into(),
            "HOME".into(),
        ]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("PMM_AUTONOMY_INTERVAL"));
    }
}
