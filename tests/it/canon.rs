//! `pmm::canon` against CPython (SPEC §2.3): the shared fixture and our own corpus (both written
//! by CPython's `json` module, see `scripts/gen-canon-corpus.py`), property tests over arbitrary
//! JSON values and floats, and a direct cross-check of `float_repr` with a live `python3`.

use crate::harness::fixture_path;
use pmm::canon;
use pmm::chain;
use proptest::prelude::*;
use serde_json::{Number, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How many mismatches an assertion message shows.
const SHOWN: usize = 10;

// ---- corpus files ----------------------------------------------------------------------------

/// Checks every case of a file in the `canonical-json/cases.jsonl` format and returns how many
/// cases it held. Panics once, at the end, listing the first [`SHOWN`] failing cases and how
/// many failed in all, so that one run shows the whole extent of a regression.
fn check_corpus(path: &Path) -> usize {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut failures = Vec::new();
    let mut scratch = Vec::new();
    let mut previous_hash: Option<String> = None;
    let mut checked = 0;
    // `lines` splits on `\n` only: a raw U+2028 inside a case stays inside it.
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        checked += 1;
        let (hash, problems) = check_case(line, &mut scratch, previous_hash.as_deref());
        if !problems.is_empty() {
            failures.push(format!(
                "{}:{}: {}",
                path.display(),
                i + 1,
                problems.join("\n    ")
            ));
        }
        previous_hash = hash;
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} cases in {} do not match CPython (first {} shown):\n{}",
        failures.len(),
        path.display(),
        failures.len().min(SHOWN),
        failures[..failures.len().min(SHOWN)].join("\n")
    );
    checked
}

/// Checks one case; returns the case's `hash` (for the next case's link) and what is wrong.
fn check_case(
    line: &str,
    scratch: &mut Vec<u8>,
    previous_hash: Option<&str>,
) -> (Option<String>, Vec<String>) {
    let mut problems = Vec::new();
    let case: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return (None, vec![format!("not a JSON line: {e}")]),
    };
    let field = |name: &str| case.get(name).and_then(Value::as_str);
    let (Some(input), Some(want), Some(kind), Some(content), Some(hash)) = (
        field("input"),
        field("canonical"),
        field("kind"),
        field("content"),
        field("hash"),
    ) else {
        return (
            None,
            vec!["missing one of input/canonical/kind/content/hash".into()],
        );
    };
    let prev_hash = match case.get("prev_hash") {
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        _ => return (None, vec!["prev_hash is neither null nor a string".into()]),
    };
    if prev_hash != previous_hash {
        problems.push(format!(
            "the cases should form one chain: prev_hash {prev_hash:?}, previous line's hash {previous_hash:?}"
        ));
    }
    let meta = match canon::parse_meta(input) {
        Ok(meta) => meta,
        Err(e) => {
            problems.push(format!("input refused: {e}\n      input: {input}"));
            return (Some(hash.to_owned()), problems);
        }
    };
    match canon::to_string(&Value::Object(meta.clone())) {
        Ok(got) if got == want => {}
        Ok(got) => problems.push(describe_difference(input, want, &got)),
        Err(e) => problems.push(format!("no canonical form: {e}\n      input: {input}")),
    }
    match chain::event_digest(scratch, kind, content, &meta, prev_hash) {
        Ok(digest) if digest.to_hex() == hash => {}
        Ok(digest) => problems.push(format!(
            "hash {digest} != expected {hash} (kind {kind:?}, content {content:?})"
        )),
        Err(e) => problems.push(format!("no digest: {e}")),
    }
    (Some(hash.to_owned()), problems)
}

/// Shows where `got` first departs from `want`, with some context on each side.
fn describe_difference(input: &str, want: &str, got: &str) -> String {
    let at = want
        .bytes()
        .zip(got.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let window = |s: &str| {
        let b = s.as_bytes();
        let from = at.saturating_sub(40);
        let to = (at + 40).min(b.len());
        String::from_utf8_lossy(&b[from.min(to)..to]).into_owned()
    };
    format!(
        "canonical differs at byte {at}:\n      input:    {input}\n      expected: …{}…\n      got:      …{}…",
        window(want),
        window(got)
    )
}

#[test]
#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
fn shared_fixture_matches_cpython() {
    let Some(path) = fixture_path("canonical-json/cases.jsonl") else {
        return;
    };
    let checked = check_corpus(&path);
    eprintln!("checked {checked} cases from {}", path.display());
    // fixtures/README.md: "2,000 cases generated with CPython 3.11's own json module".
    assert_eq!(checked, 2000, "{} is incomplete", path.display());
}

#[test]
fn own_corpus_matches_cpython() {
    // Committed with the project, so this test never skips.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/canon-corpus.jsonl");
    assert!(
        path.exists(),
        "{} is missing: run scripts/gen-canon-corpus.py",
        path.display()
    );
    let checked = check_corpus(&path);
    eprintln!("checked {checked} cases from {}", path.display());
    assert_eq!(
        checked,
        3000,
        "{} is incomplete: run scripts/gen-canon-corpus.py",
        path.display()
    );
}

// ---- arbitrary values ------------------------------------------------------------------------

/// What a generated JSON value means, independently of how `serde_json` holds it: the oracle
/// that a canonical text, parsed back, is compared with.
#[derive(Debug, Clone)]
enum Model {
    Null,
    Bool(bool),
    /// The decimal text of an integer of any size (`-0` allowed: it means 0).
    Int(String),
    Float(f64),
    Str(String),
    Arr(Vec<Model>),
    Obj(BTreeMap<String, Model>),
}

impl Model {
    fn to_value(&self) -> Value {
        match self {
            Model::Null => Value::Null,
            Model::Bool(b) => Value::Bool(*b),
            Model::Int(text) => Value::Number(text.parse().expect("integer text")),
            Model::Float(f) => Value::Number(Number::from_f64(*f).expect("finite")),
            Model::Str(s) => Value::String(s.clone()),
            Model::Arr(items) => Value::Array(items.iter().map(Model::to_value).collect()),
            Model::Obj(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), v.to_value())).collect())
            }
        }
    }
}

/// An integer's text with the sign of zero dropped, as Python's `int` has no negative zero.
fn normalize_int(text: &str) -> &str {
    if text.trim_start_matches('-').bytes().all(|b| b == b'0') {
        "0"
    } else {
        text
    }
}

/// Whether `v` (a parsed canonical text) means what `m` means: same structure, same strings and
/// keys, integers exactly equal, floats still floats and bit-for-bit equal (so `-0.0` stays
/// negative).
fn same_meaning(m: &Model, v: &Value, at: &str) -> Result<(), String> {
    let fail = |what: &str| Err(format!("at {at}: {what}: expected {m:?}, got {v}"));
    match (m, v) {
        (Model::Null, Value::Null) => Ok(()),
        (Model::Bool(a), Value::Bool(b)) if a == b => Ok(()),
        (Model::Int(a), Value::Number(n)) => {
            let text = n.to_string();
            if canon::is_float_literal(&text) {
                fail("integer became a float")
            } else if normalize_int(a) != normalize_int(&text) {
                fail("integer changed")
            } else {
                Ok(())
            }
        }
        (Model::Float(f), Value::Number(n)) => {
            let text = n.to_string();
            if !canon::is_float_literal(&text) {
                return fail("float became an integer");
            }
            match text.parse::<f64>() {
                Ok(g) if g.to_bits() == f.to_bits() => Ok(()),
                _ => fail("float changed"),
            }
        }
        (Model::Str(a), Value::String(b)) if a == b => Ok(()),
        (Model::Arr(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .try_for_each(|(i, (m, v))| same_meaning(m, v, &format!("{at}[{i}]"))),
        (Model::Obj(a), Value::Object(b))
            if a.len() == b.len() && a.keys().zip(b.keys()).all(|(x, y)| x == y) =>
        {
            a.iter()
                .zip(b.values())
                .try_for_each(|((k, m), v)| same_meaning(m, v, &format!("{at}.{k:?}")))
        }
        _ => fail("different value"),
    }
}

/// Characters weighted towards what canonical JSON must escape: controls, quotes, DEL, the
/// line separators, the BMP's edges and astral characters (surrogate pairs).
fn json_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => any::<char>(),
        3 => (0x20u8..0x7f).prop_map(char::from),
        2 => (0u8..0x20).prop_map(char::from),
        2 => prop::sample::select(vec![
            '"', '\\', '/', '\u{7f}', '\u{80}', '\u{ff}', '\u{2028}', '\u{2029}', '\u{feff}',
            '\u{d7ff}', '\u{e000}', '\u{fffd}', '\u{ffff}', '\u{10000}', '\u{10ffff}',
        ]),
        2 => (0x10000u32..=0x10ffff).prop_filter_map("a char", char::from_u32),
    ]
}

fn json_string() -> impl Strategy<Value = String> {
    prop::collection::vec(json_char(), 0..12).prop_map(|cs| cs.into_iter().collect())
}

/// Integers: any i64, `-0`, and integers far beyond 64 bits of either sign.
fn int_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<i64>().prop_map(|i| i.to_string()),
        1 => Just("-0".to_string()),
        1 => prop::sample::select(vec![
            "18446744073709551615", "18446744073709551616", "-9223372036854775809",
            "-18446744073709551617",
        ]).prop_map(str::to_string),
        2 => "-?[1-9][0-9]{19,80}",
    ]
}

/// Finite floats: any bit pattern (so subnormals and both extremes), short decimals, integral
/// values, the neighbours of the points where `repr` changes layout, powers of two, and ties.
fn finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => (-1074i32..1024).prop_map(pow2),
        1 => tie_f64(),
        4 => any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |f| f.is_finite()),
        2 => (-10_000_000i64..10_000_000, 0u32..10)
            .prop_map(|(n, k)| n as f64 / 10f64.powi(k as i32)),
        1 => (any::<i32>(), -70i32..70).prop_map(|(n, e)| n as f64 * 2f64.powi(e)),
        1 => (
            prop::sample::select(vec![1e-4, 1e16, 1e-5, 1e15, 0.0, 5e-324, f64::MAX, f64::MIN_POSITIVE]),
            -2i64..=2,
            any::<bool>(),
        )
            .prop_map(|(f, step, neg)| {
                let g = f64::from_bits((f.to_bits() as i64 + step).max(0) as u64);
                let g = if g.is_finite() { g } else { f };
                if neg { -g } else { g }
            }),
    ]
}

/// Floats whose shortest round-trip digits have two equally close candidates, where CPython
/// rounds half to even (1000000000000000.25 is `1000000000000000.2`): x.25 and x.75 in
/// [2**49, 2**50), where doubles are 1/8 apart.
fn tie_f64() -> impl Strategy<Value = f64> {
    (1u64 << 50..1u64 << 51, any::<bool>()).prop_map(|(m, neg)| {
        let f = (m * 4 + 2) as f64 / 8.0;
        if neg {
            -f
        } else {
            f
        }
    })
}

fn json_model() -> impl Strategy<Value = Model> {
    let leaf = prop_oneof![
        Just(Model::Null),
        any::<bool>().prop_map(Model::Bool),
        int_text().prop_map(Model::Int),
        finite_f64().prop_map(Model::Float),
        json_string().prop_map(Model::Str),
    ];
    // At most 4 levels of arrays/objects.
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Model::Arr),
            prop::collection::btree_map(json_string(), inner, 0..6).prop_map(Model::Obj),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Canonical text is ASCII, is a fixed point (canonical of its parse is itself), means the
    /// same as the value it came from, and does not depend on how that value was spelled.
    #[test]
    fn canonical_text_is_ascii_idempotent_and_faithful(m in json_model()) {
        let v = m.to_value();
        let c = canon::to_string(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(c.is_ascii(), "not ASCII: {}", c);

        let back: Value = serde_json::from_str(&c)
            .map_err(|e| TestCaseError::fail(format!("canonical text {c} does not parse: {e}")))?;
        prop_assert_eq!(canon::to_string(&back).unwrap(), c.clone());
        same_meaning(&m, &back, "$").map_err(TestCaseError::fail)?;

        // serde_json's own (raw UTF-8, unsorted-by-us) spelling canonicalizes to the same text.
        let respelled: Value = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        prop_assert_eq!(canon::to_string(&respelled).unwrap(), c);
    }

    /// `float_repr` round-trips exactly and has CPython's layout: the shortest correctly rounded
    /// digits, scientific iff the decimal exponent is < -4 or >= 16.
    #[test]
    fn float_repr_round_trips_with_python_layout(f in finite_f64()) {
        let s = canon::float_repr(f);
        let back: f64 = s.parse().map_err(|e| TestCaseError::fail(format!("{s}: {e}")))?;
        prop_assert_eq!(back.to_bits(), f.to_bits(), "{} does not round-trip {:e}", s, f);
        check_python_layout(f, &s).map_err(|e| TestCaseError::fail(format!("{s} for {f:e}: {e}")))?;
    }
}

/// The rules of CPython's `float_repr_style = 'short'` `repr`, checked on the text alone plus
/// the value, without reusing `canon`'s own formatting path.
fn check_python_layout(f: f64, s: &str) -> Result<(), String> {
    let body = match s.strip_prefix('-') {
        Some(b) if f.is_sign_negative() => b,
        None if !f.is_sign_negative() => s,
        _ => return Err("wrong sign".into()),
    };
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    // The significant digits and the decimal exponent of the first one.
    let (digits, exp) = if let Some((mantissa, exp)) = body.split_once('e') {
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.len() != 1 || int == "0" || !all_digits(int) {
            return Err("scientific mantissa must start with one nonzero digit".into());
        }
        if mantissa.contains('.') && (!all_digits(frac) || frac.ends_with('0')) {
            return Err("scientific fraction must be digits without trailing zeros".into());
        }
        if exp.len() < 3 {
            return Err("exponent must have a sign and at least two digits".into());
        }
        let (sign, e) = exp.split_at(1);
        if !(sign == "+" || sign == "-") || e.len() < 2 || !all_digits(e) {
            return Err("exponent must have a sign and at least two digits".into());
        }
        let e: i32 = exp.parse().map_err(|_| "bad exponent")?;
        if (-4..16).contains(&e) {
            return Err(format!(
                "exponent {e} should have been written positionally"
            ));
        }
        (format!("{int}{frac}"), e)
    } else {
        let (int, frac) = body.split_once('.').ok_or("positional form needs a '.'")?;
        if !all_digits(int) || !all_digits(frac) || (int.len() > 1 && int.starts_with('0')) {
            return Err("positional form must be digits '.' digits".into());
        }
        if frac.len() > 1 && frac.ends_with('0') {
            return Err("trailing zeros in the fraction".into());
        }
        if f == 0.0 {
            return if body == "0.0" {
                Ok(())
            } else {
                Err("zero is 0.0".into())
            };
        }
        let all = format!("{int}{frac}");
        let lead = all.len() - all.trim_start_matches('0').len();
        let e = int.len() as i32 - 1 - lead as i32;
        if !(-4..16).contains(&e) {
            return Err(format!(
                "exponent {e} should have been written scientifically"
            ));
        }
        (all.trim_start_matches('0').to_string(), e)
    };
    let sig = digits.trim_end_matches('0');
    let k = sig.len().max(1);
    // The nearest k-digit string, ties to even (Rust's `{:.*e}` rounds exactly that way)
    // whenever it round-trips; below a power of two it may not, and then the value itself
    // having round-tripped (checked by the caller) is all there is to ask.
    let rounded = format!("{:.*e}", k - 1, f.abs());
    let (m, e) = rounded.split_once('e').ok_or("no exponent")?;
    let nearest_round_trips = rounded.parse::<f64>().map(f64::to_bits) == Ok(f.abs().to_bits());
    if nearest_round_trips && (m.replace('.', "") != sig || e.parse::<i32>() != Ok(exp)) {
        return Err(format!("digits are not the nearest {k}: {rounded}"));
    }
    // ...and no fewer digits would do.
    if k > 1 {
        let shorter = format!("{:.*e}", k - 2, f.abs());
        if shorter.parse::<f64>().map(f64::to_bits) == Ok(f.abs().to_bits()) {
            return Err(format!("not the shortest: {shorter} round-trips too"));
        }
    }
    Ok(())
}

// ---- CPython itself --------------------------------------------------------------------------

/// 2**e for every e a double can hold exactly, subnormals included (`powi` would underflow).
fn pow2(e: i32) -> f64 {
    if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (e + 1074))
    }
}

/// A fixed-seed generator (SplitMix64), so the cross-check sends the same floats every run.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `f` in the form Python's `float.fromhex` reads exactly.
fn hex_float(f: f64) -> String {
    let bits = f.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let mantissa = bits & ((1 << 52) - 1);
    if exp == 0 {
        format!("{sign}0x0.{mantissa:013x}p-1022")
    } else {
        format!("{sign}0x1.{mantissa:013x}p{}", exp - 1023)
    }
}

/// ~2,000 floats from a fixed seed (random bit patterns, short decimals, integral values, ties,
/// the neighbours of the layout switch points) and every power of two a double holds.
fn cross_check_floats() -> Vec<f64> {
    let mut rng = SplitMix64(0x706d_6d5f_6361_6e6f); // "pmm_cano"
    let mut out = Vec::with_capacity(2000);
    while out.len() < 1000 {
        let f = f64::from_bits(rng.next());
        if f.is_finite() {
            out.push(f);
        }
    }
    for _ in 0..300 {
        let n = (rng.next() % 2_000_000_001) as i64 - 1_000_000_000;
        out.push(n as f64 / 10f64.powi((rng.next() % 12) as i32));
    }
    for _ in 0..150 {
        let n = (rng.next() >> 11) as f64; // integral, up to 2^53
        out.push(n * 2f64.powi((rng.next() % 40) as i32));
    }
    for base in [
        1e-4,
        1e16,
        1e-5,
        1e15,
        1e22,
        1e23,
        0.1,
        5e-324,
        f64::MIN_POSITIVE,
        f64::MAX,
    ] {
        for step in -10i64..=10 {
            let g = f64::from_bits((base.to_bits() as i64 + step).max(0) as u64);
            if g.is_finite() {
                out.push(g);
                out.push(-g);
            }
        }
    }
    // Ties between two shortest candidates (CPython rounds half to even)...
    for _ in 0..150 {
        let m = (1u64 << 50) + (rng.next() >> 14);
        out.push((m * 4 + 2) as f64 / 8.0);
    }
    // ...and powers of two, where the interval below is half as wide.
    out.extend((-1074..1024).map(pow2));
    out.extend([
        0.0,
        -0.0,
        9999999999999998.0,
        1.7976931348623157e308,
        123456.789,
    ]);
    out
}

#[test]
fn float_repr_matches_live_cpython() {
    if !crate::harness::tool_or_skip("python3", "the live CPython cross-check") {
        return;
    }
    let floats = cross_check_floats();
    let script = "import sys\nfor line in sys.stdin:\n    print(repr(float.fromhex(line)))\n";
    // python3 is there (tool_or_skip said so): failing to start it is a failure, never a
    // silent skip.
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting python3");
    let input: String = floats.iter().map(|f| hex_float(*f) + "\n").collect();
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Written from another thread: both pipes may fill up before either side finishes.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut output = String::new();
    child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut output)
        .expect("reading python3's output");
    writer
        .join()
        .expect("writer thread")
        .expect("writing to python3");
    let status = child.wait().expect("waiting for python3");
    assert!(status.success(), "python3 failed: {status}");

    let reprs: Vec<&str> = output.lines().collect();
    assert_eq!(
        reprs.len(),
        floats.len(),
        "python3 answered {} lines",
        reprs.len()
    );
    let mismatches: Vec<String> = floats
        .iter()
        .zip(&reprs)
        .filter(|(f, want)| canon::float_repr(**f) != **want)
        .map(|(f, want)| {
            format!(
                "{} ({:#018x}): python {want}, ours {}",
                hex_float(*f),
                f.to_bits(),
                canon::float_repr(*f)
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} floats differ from CPython's repr (first {} shown):\n{}",
        mismatches.len(),
        floats.len(),
        mismatches.len().min(SHOWN),
        mismatches[..mismatches.len().min(SHOWN)].join("\n")
    );
    eprintln!("{} floats match CPython's repr", floats.len());
}

// ---- known divergences -------------------------------------------------------------------------

/// `serde_json` built with `arbitrary_precision` carries numbers through serde as a one-entry
/// map keyed `$serde_json::private::Number`, so a real object whose first key is that string is
/// taken for a number: `{"a":{"$serde_json::private::Number":"1"}}` comes out as `{"a":1}` (a
/// different hash from CPython's) and `{"$serde_json::private::Number":"1"}` is refused. Fixing
/// it needs a parser that does not go through `serde_json::Value`'s visitor.
#[test]
#[ignore = "known divergence: serde_json arbitrary_precision's private number key"]
fn object_keyed_like_serde_json_private_number_is_kept() {
    for text in [
        r#"{"a":{"$serde_json::private::Number":"1"}}"#,
        r#"{"$serde_json::private::Number":"1"}"#,
        r#"{"a":{"\u0024serde_json::private::Number":"2","b":3}}"#,
    ] {
        let meta = canon::parse_meta(text).unwrap_or_else(|e| panic!("{text}: refused: {e}"));
        let got = canon::to_string(&Value::Object(meta)).expect("canonical form");
        // CPython: json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        let want = text.replace(r"\u0024", "$");
        assert_eq!(got, want, "{text}");
    }
}
