//! `pmm-verify`: verify a ledger or an export.

use crate::chain::merkle;
use crate::chain::note::{self, Checkpoint, NoteError, SignerKey, VerifierKey, WitnessKey};
use crate::chain::proof::{self, Hex, Proof, Trusted};
use crate::chain::{Anchor, AnchorError, Digest, Summary};
use crate::cli::{ClockArgs, CommonArgs, Exit, LedgerArgs, Out, Program};
use crate::interchange::Input;
use crate::store::Ledger;
use crate::Error;
use anyhow::Context;
use std::path::{Path, PathBuf};

const AFTER_HELP: &str = "\
EXAMPLES:
  Verify the ledger (the --db one, or $PMM_DB):
    pmm-verify
  Verify an export in CI, against the anchors saved by the previous run:
    pmm-export -o ledger.json.gz && pmm-verify ledger.json.gz --anchors-from anchors.txt
    pmm-verify ledger.json.gz | tail -1 > anchors.txt      # save the summary as the next anchor
  Verify a PostgreSQL ledger from the server's own rows (not this host's cache):
    pmm-verify --db 'postgres://reader@db.example/mind?sslmode=verify-full&sslrootcert=ca.pem'
  Verify a stream:
    pmm-export --format jsonl | pmm-verify -
  Only the findings about links:
    pmm-verify ledger.json | jq -c 'select(.problem==\"broken_link\")'
  Also recompute every derived event (cids, embeddings, digests, roots, slots, snapshots):
    pmm-verify --deep | jq -c 'select(.type==\"summary\") | .deep'
  Prove event 42 to someone who holds only a signed checkpoint (docs/verification.md):
    pmm-export --checkpoint --key log.key > cp.txt           # the signer, once
    pmm-verify --prove 42 --size \"$(sed -n 2p cp.txt)\" > proof.json
    pmm-verify --check-proof proof.json --checkpoint cp.txt --key \"$VKEY\"   # no ledger needed
  Check that the ledger only grew since a signed checkpoint:
    pmm-verify --checkpoint cp.txt --key \"$VKEY\"
  Witness: cosign a checkpoint consistent with the last one cosigned, then check it:
    pmm-verify --checkpoint cp.txt --key \"$VKEY\" --cosign --witness-key w.key \\
      --previous last.txt > cosigned.txt && cp cosigned.txt last.txt
    pmm-verify --checkpoint cosigned.txt --key \"$VKEY\" --witness \"$WKEY\"

OUTPUT:
  One {\"type\":\"finding\",\"id\",\"problem\",...} line per problem: hash_mismatch, broken_link
  (with points_to: the event the prev_hash really names, or null), id_gap, genesis_prev_hash,
  duplicate_hash, anchor_mismatch, malformed (with its line), empty (an input without events:
  an empty file or ledger is never a clean pass unless --allow-empty), sqlite_damage (for SQLite
  ledgers: what SQLite's quick_check, or integrity_check with --integrity, reports), and with --deep
  derived_mismatch (what, expected, found); one {\"type\":\"erased\",\"id\",\"hash\",\"erasure_id\",
  \"reason\"} line per event whose content pmm-append --erase removed (not a finding: the erasure
  event in the chain names its id and hash); then one {\"type\":\"summary\"} line per input with
  counts, last_id, last_hash, ok and sha256_full_digest (and with --deep, what was recomputed
  and what was skipped because an input was erased).
  The Merkle tree (RFC 9162; leaf = SHA-256(0x00 || the event hash's 32 bytes), one per
  event in id order) answers instead, with hashes in lowercase hex and paths in RFC 9162
  order:
    --root            {\"type\":\"root\",\"size\",\"root\"}
    --prove ID        {\"type\":\"inclusion\",\"id\",\"index\",\"size\",\"leaf\",\"event_hash\",\"root\",\"path\"}
    --consistency M N {\"type\":\"consistency\",\"from\",\"to\",\"root_from\",\"root_to\",\"path\"}
    --check-proof F   {\"type\":\"proof_check\",\"ok\",\"proof\",\"size\",...}
    --checkpoint F    {\"type\":\"checkpoint_check\",\"ok\",\"size\",\"root\",\"ledger_size\",...}
    --cosign          the checkpoint with the witness's cosignature line (a signed note)

EXIT STATUS:
  0  every input verifies clean (a proof checks, a checkpoint matches the ledger)
  1  findings (an input without events is one, unless --allow-empty); a proof that does
     not check; a checkpoint whose signature, root or history does not match the ledger,
     or a ledger whose events do not verify against it; an event --prove cannot vouch for
  2  an input could not be read (missing, not a ledger, truncated gzip, a line longer than
     --max-line), a bad --anchor, or an --anchors-from file that holds no anchor

ENVIRONMENT:
  PMM_DB    the ledger verified when no FILE is given (default .data/pmmdb/pmm.db)";

/// Verify a ledger or an export: every hash, every link, ids and anchors.
///
/// Recomputes the hash of every event (the canonical JSON of kind, content, meta and
/// prev_hash), checks that each prev_hash is the previous event's hash, that ids rise by one
/// from 1, that the first prev_hash is null and that no hash repeats. Reads SQLite ledgers,
/// reference JSON exports, JSON Lines and gzip of either (detected from the content), as a
/// stream: memory stays flat whatever the size.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-verify", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,
    /// The time a cosignature (`--cosign`) is dated
    #[command(flatten)]
    clock: ClockArgs,

    /// Files to verify (SQLite, JSON, JSONL, .gz; `-` for stdin) [default: the --db ledger]
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// An anchor `ID:HASH` saved from an earlier run: event ID must still have HASH (repeatable)
    #[arg(long, value_name = "ID:HASH")]
    anchor: Vec<Anchor>,
    /// Read anchors from a file: a saved summary line (its last_id:last_hash), or ID:HASH
    /// lines (blank lines and # comments are skipped)
    #[arg(long, value_name = "FILE")]
    anchors_from: Option<PathBuf>,
    /// Also recompute every derived event from its inputs (commitment cids, hash64
    /// embeddings, retrieval digests, checkpoint roots, slot ids, self-model snapshots) and
    /// report each that differs as a derived_mismatch
    #[arg(long)]
    deep: bool,
    /// Accept an input without events as clean (without it, an empty file or ledger is an
    /// `empty` finding, exit 1)
    #[arg(long)]
    allow_empty: bool,
    /// For SQLite ledgers: run SQLite's full PRAGMA integrity_check (every index against its
    /// table) instead of the default quick_check (page structure and records)
    #[arg(long)]
    integrity: bool,
    /// For a PostgreSQL ledger this host refuses (history_rewritten, rolled_back): verify the
    /// server's chain alone and, when it is clean, follow the server from now on, as restored
    /// from a backup on purpose. This host's cache is kept aside (renamed), and the step is
    /// logged beside it (docs/scale-out.md, "Backups and restores")
    #[arg(long)]
    accept_restored_server: bool,

    /// Print the Merkle root of the ledger (of its first --size events)
    #[arg(long, help_heading = "Proofs")]
    root: bool,
    /// Print the inclusion proof of event ID (in the tree of --size events); refused (exit 1)
    /// for an event whose content no longer gives its stored hash
    #[arg(long, value_name = "ID", help_heading = "Proofs", value_parser = clap::value_parser!(i64).range(1..))]
    prove: Option<i64>,
    /// The tree size --root and --prove answer for [default: every event]
    #[arg(long, value_name = "N", help_heading = "Proofs", value_parser = clap::value_parser!(u64))]
    size: Option<u64>,
    /// Print the consistency proof that the tree of M events is a prefix of the tree of N
    #[arg(long, num_args = 2, value_names = ["M", "N"], help_heading = "Proofs", value_parser = clap::value_parser!(u64))]
    consistency: Vec<u64>,
    /// Check a proof record (from --root, --prove or --consistency; `-` for stdin) offline,
    /// without a ledger, against --root-hex or a --checkpoint signed by --key
    #[arg(long, value_name = "FILE", help_heading = "Proofs")]
    check_proof: Option<PathBuf>,
    /// The root hash (64 hex digits) --check-proof trusts
    #[arg(long, value_name = "HEX", help_heading = "Proofs")]
    root_hex: Option<String>,
    /// A signed checkpoint (pmm-export --checkpoint): alone, check the ledger against it (its
    /// chain verifies, the tree of its size, recomputed from the events, has its root, and the
    /// ledger only grew since); with --check-proof, what the proof is checked against
    #[arg(long, value_name = "FILE", help_heading = "Proofs", requires = "key")]
    checkpoint: Option<PathBuf>,
    /// The verifier key of the checkpoint: NAME+HASH+BASE64 (as pmm-export --keygen printed
    /// it), or a file holding it
    #[arg(long, value_name = "VERIFIERKEY", help_heading = "Proofs")]
    key: Option<String>,
    /// Rebuild the ledger's stored Merkle tree from its events (a writer: it opens the
    /// ledger for writing) and print its root
    #[arg(long, help_heading = "Proofs")]
    rebuild_tree: bool,
    /// With --checkpoint: cosign it as a witness (C2SP tlog-cosignature, Ed25519
    /// cosignature/v1) once the ledger proves it consistent (and, with --previous, that the
    /// log only grew since the last one cosigned): print the checkpoint with the witness's
    /// signature line added instead of the check record
    #[arg(long, help_heading = "Proofs", requires_all = ["checkpoint", "witness_key"])]
    cosign: bool,
    /// The witness's private key file for --cosign (pmm-export --keygen NAME --key FILE
    /// writes one; the verifier key it prints is the witness's public key)
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Proofs",
        requires = "cosign"
    )]
    witness_key: Option<PathBuf>,
    /// With --checkpoint: the checkpoint last checked or cosigned (signed by the same --key);
    /// the new one must be consistent with it: not smaller, its tree a prefix of the new one
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Proofs",
        requires = "checkpoint"
    )]
    previous: Option<PathBuf>,
    /// With --checkpoint: also require a valid cosignature by this witness
    /// (NAME+HASH+BASE64, the verifier key pmm-export --keygen printed for it, or a file
    /// holding it)
    #[arg(
        long,
        value_name = "WITNESSKEY",
        help_heading = "Proofs",
        requires = "checkpoint"
    )]
    witness: Option<String>,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
}

/// Reads anchors from a saved summary or a list. A file that yields no anchor (empty, only
/// comments, an events file, `{}`, an empty ledger's summary) is bad input: a vacuous pass
/// would hide the history it was meant to pin.
pub fn read_anchors(path: &Path) -> crate::Result<Vec<Anchor>> {
    // Through the bounded whole-file reader: `--anchors-from /dev/zero` is refused.
    let limit = crate::lines::max_line();
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut file = std::io::BufReader::new(file);
    let text = crate::lines::read_bounded(&mut file, limit, limit).map_err(|e| {
        if e.over_limit() {
            Error::bad_input(Some(e.at(&path.display().to_string())), e.to_string())
        } else {
            Error::io(path, e.error)
        }
    })?;
    let lines: Vec<&[u8]> = crate::lines::lines_of(&text).collect();
    let mut anchors = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let at = || Some(format!("{}:{}", path.display(), i + 1));
        let line = std::str::from_utf8(line).map_err(|_| Error::NotUtf8 {
            at: format!("{}:{}", path.display(), i + 1),
        })?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| Error::bad_input(at(), format!("not valid JSON: {e}")))?;
            if v.get("type").and_then(|t| t.as_str()) != Some("summary") {
                continue;
            }
            match (
                v.get("last_id").and_then(|x| x.as_i64()),
                v.get("last_hash").and_then(|x| x.as_str()),
            ) {
                (Some(id), Some(hash)) => anchors.push(
                    format!("{id}:{hash}")
                        .parse()
                        .map_err(|e: AnchorError| Error::bad_input(at(), e))?,
                ),
                _ => continue, // an empty ledger's summary anchors nothing
            }
        } else {
            for word in line
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
            {
                anchors.push(
                    word.parse()
                        .map_err(|e: AnchorError| Error::bad_input(at(), e))?,
                );
            }
        }
    }
    if anchors.is_empty() {
        return Err(Error::bad_input(
            Some(path.display().to_string()),
            "no anchors in this file (expected a saved summary line with last_id and last_hash, or ID:HASH lines)",
        ));
    }
    Ok(anchors)
}

/// Verifies one input, printing findings as they are found, then its summary. With `deep`,
/// derived events are recomputed too (the engine is [`crate::audit::verify`]).
pub fn verify_input(
    input: &Input,
    opts: crate::audit::verify::Options,
    quiet: bool,
    out: &mut Out,
) -> anyhow::Result<Summary> {
    let size = input
        .path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let bar = crate::cli::progress(size, quiet, "verifying");
    let summary = crate::audit::verify::verify(input, opts, &|n| bar.set_position(n), &mut |f| {
        out.record(&f)
    })
    .with_context(|| format!("cannot verify {}", input.name()))?;
    bar.finish_and_clear();
    out.record(&summary)?;
    out.flush()?;
    Ok(summary)
}

/// Runs `pmm-verify`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    if let Some(outcome) = run_proofs(&ProofArgs {
        db: args.ledger.path(),
        root: args.root,
        prove: args.prove,
        size: args.size,
        consistency: (args.consistency.len() == 2)
            .then(|| (args.consistency[0], args.consistency[1])),
        check_proof: args.check_proof.clone(),
        root_hex: args.root_hex.clone(),
        checkpoint: args.checkpoint.clone(),
        key: args.key.clone(),
        rebuild_tree: args.rebuild_tree,
        files: !args.files.is_empty(),
        witnessing: Witnessing {
            cosign: args.witness_key.clone().filter(|_| args.cosign),
            previous: args.previous.clone(),
            witness: args.witness.clone(),
            clock: args.clock.clock(),
        },
    })? {
        return Ok(outcome);
    }
    if args.accept_restored_server
        && (!args.files.is_empty()
            || !args
                .ledger
                .path()
                .to_str()
                .is_some_and(crate::store::is_postgres_url))
    {
        return Err(Error::bad_input(
            Some("--accept-restored-server".into()),
            "is for a PostgreSQL ledger (--db postgres://…), which this host refuses after a restore",
        )
        .into());
    }
    let mut anchors = args.anchor.clone();
    if let Some(path) = &args.anchors_from {
        anchors.extend(read_anchors(path)?);
    }
    let inputs: Vec<Input> = if args.files.is_empty() {
        // The --db ledger is a regular file (a FILE argument may be a pipe: <(pmm-export)).
        let db = args.ledger.path();
        if let Ok(md) = std::fs::metadata(&db) {
            if !md.is_file() && !md.is_dir() {
                return Err(crate::store::not_regular(&db, &md).into());
            }
        }
        vec![Input::new(&db)]
    } else {
        args.files.iter().map(|f| Input::new(f)).collect()
    };
    let mut out = Out::new();
    let mut ok = true;
    for input in &inputs {
        let opts = crate::audit::verify::Options {
            anchors: anchors.clone(),
            deep: args.deep,
            allow_empty: args.allow_empty,
            integrity: args.integrity,
            server_only: args.accept_restored_server,
        };
        let summary = verify_input(input, opts, args.common.quiet, &mut out)?;
        ok &= summary.ok;
        if let Some(url) = input
            .postgres_url()
            .filter(|_| args.accept_restored_server && summary.ok)
        {
            accept_restored(url, &summary)?;
        }
    }
    Ok(if ok { Exit::Success } else { Exit::Negative })
}

/// `--accept-restored-server`, once the server's chain verified clean: this host follows it
/// from its head on (its cache kept aside), and says so on stderr as in the log beside the
/// cache.
fn accept_restored(url: &str, summary: &Summary) -> anyhow::Result<()> {
    let head = summary.last_id.map(|id| crate::store::Head {
        id,
        hash: summary.last_hash.clone(),
    });
    let line = crate::store::replica::witness::accept_restored(url, head.as_ref())?;
    eprintln!("pmm-verify: {line}");
    Ok(())
}

/// The proof options, apart from the chain verification's.
struct ProofArgs {
    db: PathBuf,
    root: bool,
    prove: Option<i64>,
    size: Option<u64>,
    consistency: Option<(u64, u64)>,
    check_proof: Option<PathBuf>,
    root_hex: Option<String>,
    checkpoint: Option<PathBuf>,
    key: Option<String>,
    rebuild_tree: bool,
    files: bool,
    witnessing: Witnessing,
}

/// What `--checkpoint` does besides checking the ledger against it.
struct Witnessing {
    /// `--cosign --witness-key FILE`: the witness's private key file.
    cosign: Option<PathBuf>,
    /// `--previous FILE`: the checkpoint the new one must be consistent with.
    previous: Option<PathBuf>,
    /// `--witness KEY`: a cosignature that must be on the checkpoint.
    witness: Option<String>,
    /// When a cosignature is dated (`--now`, else the system clock).
    clock: crate::event::Clock,
}

/// A key, checkpoint or proof file (`-`: stdin), through the one bounded reader.
fn read_text(path: &Path) -> crate::Result<String> {
    crate::cli::read_small_file(path)
}

/// `--key`: the key's text, or a file holding it.
fn verifier_key(key: &str) -> crate::Result<VerifierKey> {
    let at = || Some("--key".to_string());
    match VerifierKey::parse(key) {
        Ok(k) => Ok(k),
        Err(e) if !Path::new(key).is_file() => Err(Error::bad_input(at(), e.to_string())),
        Err(_) => VerifierKey::parse(&read_text(Path::new(key))?)
            .map_err(|e| Error::bad_input(at(), e.to_string())),
    }
}

/// Reads a signed checkpoint and opens it with the key: `Err` for unreadable input (exit 2),
/// `Ok(Err)` for a checkpoint the key did not sign (a negative answer).
fn signed_checkpoint(path: &Path, key: &str) -> crate::Result<Result<Checkpoint, NoteError>> {
    let key = verifier_key(key)?;
    let text = read_text(path)?;
    match note::open_checkpoint(&text, &key) {
        Err(e @ NoteError::Malformed { .. }) => Err(Error::bad_input(
            Some(path.display().to_string()),
            e.to_string(),
        )),
        r => Ok(r),
    }
}

fn hexes(path: &[Digest]) -> Vec<Hex> {
    path.iter().map(|d| Hex(*d)).collect()
}

/// The tree size asked for: `size`, at most the ledger's.
fn tree_size(tree: &crate::store::Tree<'_>, size: Option<u64>) -> crate::Result<u64> {
    crate::audit::prove::tree_size(tree, size, "--size")
}

/// The proof modes of `pmm-verify`: `None` when none was asked for.
fn run_proofs(a: &ProofArgs) -> anyhow::Result<Option<Exit>> {
    if !proof_mode(a)? {
        return Ok(None);
    }
    let mut out = Out::new();
    let outcome = if let Some(file) = &a.check_proof {
        check_proof_file(a, file, &mut out)?
    } else if a.rebuild_tree {
        rebuild_tree(a, &mut out)?
    } else {
        let ledger = Ledger::open_reader(&a.db)?;
        if a.root {
            let mut tree = ledger.tree()?;
            let size = tree_size(&tree, a.size)?;
            let root = merkle::root(&mut tree, size).map_err(|e| ledger.err(e))?;
            out.record(&Proof::Root {
                size,
                root: Hex(root),
            })?;
            Exit::Success
        } else if let Some(id) = a.prove {
            out.record(&crate::audit::prove::inclusion(
                &ledger, id, a.size, "--size",
            )?)?;
            Exit::Success
        } else if let Some((from, to)) = a.consistency {
            consistency(&ledger, from, to, &mut out)?
        } else {
            // --checkpoint alone: check the ledger against it.
            let (Some(cp_path), Some(key)) = (&a.checkpoint, &a.key) else {
                return Ok(None);
            };
            check_against_checkpoint(&ledger, cp_path, key, &a.witnessing, &mut out)?
        }
    };
    out.flush()?;
    Ok(Some(outcome))
}

/// Whether one proof mode was asked for (exactly one may be; the proof-only flags need one).
fn proof_mode(a: &ProofArgs) -> anyhow::Result<bool> {
    let modes = [
        a.root,
        a.prove.is_some(),
        a.consistency.is_some(),
        a.check_proof.is_some(),
        a.checkpoint.is_some() && a.check_proof.is_none(),
        a.rebuild_tree,
    ];
    let n = modes.iter().filter(|m| **m).count();
    if n == 0 {
        if a.root_hex.is_some() || a.key.is_some() || a.size.is_some() {
            return Err(Error::bad_input(
                None,
                "--root-hex, --key and --size go with --root, --prove, --check-proof or --checkpoint",
            )
            .into());
        }
        return Ok(false);
    }
    if n > 1 {
        return Err(Error::bad_input(
            None,
            "choose one of --root, --prove, --consistency, --check-proof, --checkpoint and --rebuild-tree",
        )
        .into());
    }
    if a.files {
        return Err(
            Error::bad_input(None, "proofs are about the --db ledger, not FILE arguments").into(),
        );
    }
    Ok(true)
}

/// `--check-proof FILE`: a proof record checked offline against `--root-hex` or a signed
/// `--checkpoint`, as one `proof_check` record.
fn check_proof_file(a: &ProofArgs, file: &Path, out: &mut Out) -> anyhow::Result<Exit> {
    let trusted = match (&a.root_hex, &a.checkpoint, &a.key) {
        (Some(hex), None, _) => Trusted::Root(Digest::from_hex(hex).ok_or_else(|| {
            Error::bad_input(Some("--root-hex".into()), "expected 64 hex digits")
        })?),
        (None, Some(cp), Some(key)) => match signed_checkpoint(cp, key)? {
            Ok(cp) => Trusted::Checkpoint(cp),
            Err(e) => {
                out.record(&serde_json::json!({
                    "type": "proof_check", "ok": false, "error": e.to_string()
                }))?;
                return Ok(Exit::Negative);
            }
        },
        _ => {
            return Err(Error::bad_input(
                Some("--check-proof".into()),
                "check it against --root-hex HEX, or --checkpoint FILE --key VERIFIERKEY",
            )
            .into())
        }
    };
    let text = read_text(file)?;
    let proof: Proof = serde_json::from_str(text.trim()).map_err(|e| {
        Error::bad_input(
            Some(file.display().to_string()),
            format!("not a proof: {e}"),
        )
    })?;
    let kind = match &proof {
        Proof::Root { .. } => "root",
        Proof::Inclusion { .. } => "inclusion",
        Proof::Consistency { .. } => "consistency",
    };
    let against = match trusted {
        Trusted::Root(_) => "root",
        Trusted::Checkpoint(_) => "checkpoint",
    };
    let (record, outcome) = match proof::check(&proof, &trusted) {
        Ok(size) => {
            let mut record = serde_json::json!({"type": "proof_check", "ok": true,
                "proof": kind, "against": against});
            // Only a checkpoint's signed size is trusted; against --root-hex the size is the
            // proof's own, unchecked claim and is not reported as trusted.
            if let Some(size) = size {
                record["trusted_size"] = size.into();
            }
            (record, Exit::Success)
        }
        Err(e) => (
            serde_json::json!({"type": "proof_check", "ok": false, "proof": kind,
                "against": against, "error": e.to_string()}),
            Exit::Negative,
        ),
    };
    out.record(&record)?;
    Ok(outcome)
}

/// `--rebuild-tree`: the stored tree rebuilt from the ledger; prints its root.
fn rebuild_tree(a: &ProofArgs, out: &mut Out) -> anyhow::Result<Exit> {
    let mut ledger = Ledger::open_writer(&a.db, crate::store::DEFAULT_BUSY_TIMEOUT_MS)?;
    ledger.rebuild(&[crate::store::Derived::Tree])?;
    let mut tree = ledger.tree()?;
    let size = tree.stored_size();
    let root = merkle::root(&mut tree, size).map_err(|e| ledger.err(e))?;
    out.record(&Proof::Root {
        size,
        root: Hex(root),
    })?;
    Ok(Exit::Success)
}

/// `--consistency M N`: the proof that the tree of N events extends the tree of M.
fn consistency(ledger: &Ledger, from: u64, to: u64, out: &mut Out) -> anyhow::Result<Exit> {
    if from > to {
        return Err(Error::bad_input(
            Some("--consistency".into()),
            format!("{from} is larger than {to}"),
        )
        .into());
    }
    let mut tree = ledger.tree()?;
    let e = |e| ledger.err(e);
    tree_size(&tree, Some(to))?;
    let path = merkle::consistency_proof(&mut tree, from, to).map_err(e)?;
    let root_from = merkle::root(&mut tree, from).map_err(e)?;
    let root_to = merkle::root(&mut tree, to).map_err(e)?;
    out.record(&Proof::Consistency {
        from,
        to,
        root_from: Hex(root_from),
        root_to: Hex(root_to),
        path: hexes(&path),
    })?;
    Ok(Exit::Success)
}

/// `--checkpoint FILE --key KEY` alone: the ledger's tree at the checkpoint's size has its
/// root, and the current tree is consistent with it (one `checkpoint_check` record).
fn check_against_checkpoint(
    ledger: &Ledger,
    cp_path: &Path,
    key: &str,
    w: &Witnessing,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    // Keys and files first: a bad one is exit 2 whatever the checkpoint says.
    let witness_signer = match &w.cosign {
        Some(path) => Some(
            SignerKey::parse(&read_text(path)?)
                .map_err(|e| Error::bad_input(Some(path.display().to_string()), e.to_string()))?,
        ),
        None => None,
    };
    let witness = match &w.witness {
        Some(k) => Some(witness_key(k)?),
        None => None,
    };
    let previous = match &w.previous {
        Some(p) => Some(signed_checkpoint(p, key)?),
        None => None,
    };
    let cp = match signed_checkpoint(cp_path, key)? {
        Ok(cp) => cp,
        Err(err) => {
            out.record(&serde_json::json!({
                "type": "checkpoint_check", "ok": false, "error": err.to_string()
            }))?;
            return Ok(Exit::Negative);
        }
    };
    // What the checkpoint vouches for is recomputed from the events (crate::audit::checkpoint).
    use crate::audit::checkpoint::Problem;
    let checked =
        crate::audit::checkpoint::check(&Input::new(&ledger.source()), &cp, previous.as_ref())?;
    let mut record = serde_json::Value::Object(checked.record);
    record["type"] = "checkpoint_check".into();
    let mut problem = checked.problem;
    if let (None, Some(wk)) = (&problem, &witness) {
        match wk.open(&read_text(cp_path)?) {
            Ok(t) => {
                record["cosigned_by"] = wk.name.clone().into();
                record["cosigned_at"] = t.into();
            }
            Err(err) => problem = Some(Problem::NoCosignature(err.to_string())),
        }
    }
    record["ok"] = problem.is_none().into();
    if let Some(p) = &problem {
        record["error"] = p.to_string().into();
    }
    if let (None, Some(signer)) = (&problem, &witness_signer) {
        let note = read_text(cp_path)?;
        let now = u64::try_from(w.clock.now().timestamp()).unwrap_or(0);
        let cosigned = signer
            .cosign(&note, now)
            .map_err(|e| Error::bad_input(Some(cp_path.display().to_string()), e.to_string()))?;
        out.raw(cosigned.as_bytes())?;
        return Ok(Exit::Success);
    }
    out.record(&record)?;
    Ok(if problem.is_some() {
        Exit::Negative
    } else {
        Exit::Success
    })
}

/// `--witness`: the key's text, or a file holding it.
fn witness_key(key: &str) -> crate::Result<WitnessKey> {
    let at = || Some("--witness".to_string());
    match WitnessKey::parse(key) {
        Ok(k) => Ok(k),
        Err(e) if !Path::new(key).is_file() => Err(Error::bad_input(at(), e.to_string())),
        Err(_) => WitnessKey::parse(&read_text(Path::new(key))?)
            .map_err(|e| Error::bad_input(at(), e.to_string())),
    }
}
