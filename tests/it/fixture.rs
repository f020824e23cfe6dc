//! The reference ledger: import, byte-identical export, verification, metrics.

use crate::harness::{fixture_path, Pmm, GPT_LEDGER};

const LAST_HASH: &str = "a3a0b51a3a1b35597111d78d39c49793b49cdc29d4c3c6f6e50587e1061f34f9";

fn assert_reference_findings(r: &crate::harness::Run) {
    assert_eq!(r.code, 1, "{r:?}");
    let links: Vec<(i64, i64)> = r
        .of_type("finding")
        .iter()
        .map(|f| {
            assert_eq!(f["problem"], "broken_link", "unexpected finding {f}");
            (f["id"].as_i64().unwrap(), f["points_to"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(links, vec![(468, 466), (470, 468), (843, 841)]);
    let s = r.summary();
    assert_eq!(s["events"], 1199);
    assert_eq!(s["hash_mismatches"], 0);
    assert_eq!(s["broken_links"], 3);
    assert_eq!(s["last_hash"], LAST_HASH);
    assert_eq!(s["ok"], false);
    assert_eq!(
        s["sha256_full_digest"],
        "4b4a53093244a8c0413d4be9afc9974f3022f431d3f7b726c8c14dc275f3fb7b"
    );
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn import_with_accept_forks_then_export_json_gives_identical_bytes() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run(
        "pmm-append",
        &["--import", src.to_str().unwrap(), "--accept-forks"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let s = &r.of_type("import")[0];
    assert_eq!(s["events"], 1199);
    assert_eq!(s["broken_links"], 3);
    let out = pmm
        .cmd("pmm-export")
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout == std::fs::read(&src).unwrap(),
        "export differs from the reference file"
    );
    // And through a gzip file, named by -o.
    let r = pmm.run("pmm-export", &["-o", "copy.json.gz"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let mut gz =
        flate2::read::GzDecoder::new(std::fs::File::open(pmm.path("copy.json.gz")).unwrap());
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut gz, &mut bytes).unwrap();
    assert!(bytes == std::fs::read(&src).unwrap());
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn import_without_accept_forks_is_refused_and_names_event_468() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    let r = pmm.run("pmm-append", &["--import", src.to_str().unwrap()], "");
    r.assert_error("pmm-append", &["event 468", "event 466", "--accept-forks"]);
    assert_eq!(pmm.count(), 0, "a refused import must write nothing");
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn verify_reports_exactly_the_three_forks_in_file_and_ledger() {
    let Some(src) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let pmm = Pmm::new();
    assert_reference_findings(&pmm.run("pmm-verify", &[src.to_str().unwrap()], ""));
    // From stdin, and gzipped.
    let text = std::fs::read_to_string(&src).unwrap();
    assert_reference_findings(&pmm.run("pmm-verify", &["-"], &text));
    let gz = pmm.path("l.json.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
    enc.finish().unwrap();
    assert_reference_findings(&pmm.run("pmm-verify", &[gz.to_str().unwrap()], ""));
    // The imported SQLite ledger, and its JSONL export.
    let r = pmm.run(
        "pmm-append",
        &["--import", src.to_str().unwrap(), "--accept-forks"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_reference_findings(&pmm.run("pmm-verify", &[], ""));
    let jsonl = pmm.run("pmm-export", &["--format", "jsonl"], "").stdout;
    assert_reference_findings(&pmm.run("pmm-verify", &["-"], &jsonl));
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn metrics_on_the_reference_ledger() {
    let Some(pmm) = Pmm::with_reference_ledger() else {
        return;
    };
    let r = pmm.run("pmm-metrics", &["--deterministic"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let m = &r.records()[0];
    assert_eq!(m["type"], "metrics");
    assert_eq!(m["event_count"], 1199);
    assert_eq!(m["broken_links"], 3);
    assert_eq!(m["hash_mismatches"], 0);
    assert_eq!(m["last_hash"], LAST_HASH);
    let kinds = m["kinds"].as_object().unwrap();
    assert_eq!(kinds.len(), 25);
    for (k, n) in [
        ("concept_bind_event", 237),
        ("concept_define", 205),
        ("concept_relate", 145),
        ("autonomy_tick", 85),
        ("reflection", 66),
        ("user_message", 17),
        ("summary_update", 15),
        ("commitment_open", 12),
        ("commitment_close", 12),
        ("config", 2),
        ("inter_ledger_ref", 1),
    ] {
        assert_eq!(kinds[k], n, "{k}");
    }
    assert_eq!(
        kinds.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
        1199
    );
    assert!(m.get("replay_ms_per_event").is_none());
    assert_eq!(m["autonomy"]["ticks"], 85);
}

/// The telemetry report of the reference ledger gives the continuity breaks and digest its
/// archived report shows.
#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn telemetry_of_the_reference_ledger_shows_its_breaks_and_digest() {
    use pmm::interchange::telemetry::TelemetryWriter;
    use pmm::interchange::{ExportContext, Input, Item, Sink};
    let Some(path) = fixture_path(GPT_LEDGER) else {
        return;
    };
    let ctx = ExportContext {
        exported_at: "2025-11-24T06:09:48Z".parse().unwrap(),
        output_name: None,
    };
    let mut out = Vec::new();
    let mut w: Box<dyn Sink> = Box::new(TelemetryWriter::new(&mut out, &ctx).unwrap());
    pmm::interchange::read(&Input::new(&path), &|_| {}, &mut |item| {
        if let Item::Event(r) = item {
            w.event(&r.event).unwrap();
        }
        Ok(true)
    })
    .unwrap();
    w.finish().unwrap();
    let text = String::from_utf8(out).unwrap();
    for line in [
        "- Event 468: expected `f6882e2206609062132a74a5eae90f962b6960123c23bbcf044b5fd0cbf77041` but saw `3420bce5eba332a2c04005964dd8d960b06d2316f40c453fe2dcbd697bafcb2c`\n",
        "- Event 470: expected `a8a3a66b9a9709e4ab737cfdbcaa2702f1ee659be51e9dd2e1107b9174130c18` but saw `5673d5c635fa728f83c9e88e86fb0477b157427ec7b0a9feced6ed5a03e14671`\n",
        "- Event 843: expected `b8fd307df6c67c07912510a35b7dd5b91cd9a30fc3d0674db870ea587e0201eb` but saw `ddd8f19e97a972326f379bc2cd909fd026cab0682652e4fa0732ed87f0324fe6`\n",
        "  \"total_events\": 1199,\n",
        "  \"continuity_breaks\": 3,\n",
        "\"sha256_full_digest\": \"4b4a53093244a8c0413d4be9afc9974f3022f431d3f7b726c8c14dc275f3fb7b\"",
        "- **Changes:** `{'autonomy_idle': 'increase_frequency', 'autonomy_reflect': 'increase_frequency', 'autonomy_summarize': 'increase_frequency'}`\n",
        "- **Recent Definitions:**\n\n  - `ontology.Gap(x)` (ontology)\n\n  - `ontology.Stability(x)` (ontology)\n\n  - `ontology.Bias(x)` (ontology)\n\n\n\n\n## 🧾",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
}
