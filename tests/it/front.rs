//! `pmm`, the front program: dispatch to `pmm-*` (arguments, streams, exit status and signals
//! untouched), its help, its errors and the completions it prints.

use crate::harness::{Pmm, Run};
use crate::stub::Stub;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The programs pmm runs: (`verify`, `pmm-verify`, its clap command).
fn programs() -> Vec<(String, String, clap::Command)> {
    pmm::cmd::commands()
        .into_iter()
        .map(|c| {
            let full = c.get_name().to_string();
            let short = full.strip_prefix("pmm-").unwrap().to_string();
            (short, full, c)
        })
        .collect()
}

/// Asserts that `pmm <name> args` and `pmm-<name> args` print the same and end the same.
fn assert_same(pmm: &Pmm, name: &str, args: &[&str], stdin: &str) -> Run {
    let via_front: Vec<&str> = std::iter::once(name).chain(args.iter().copied()).collect();
    let front = pmm.run("pmm", &via_front, stdin);
    let direct = pmm.run(&format!("pmm-{name}"), args, stdin);
    assert_eq!(
        front.code, direct.code,
        "exit status of pmm {name} {args:?}"
    );
    assert_eq!(front.stdout, direct.stdout, "stdout of pmm {name} {args:?}");
    assert_eq!(front.stderr, direct.stderr, "stderr of pmm {name} {args:?}");
    front
}

#[test]
fn pmm_verify_is_pmm_verify_with_the_same_output_and_exit_status() {
    let pmm = Pmm::new();
    pmm.seed(12);
    let db = pmm.db.to_str().unwrap();
    // A clean ledger: exit 0.
    let r = assert_same(&pmm, "verify", &["--db", db], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["events"], 12);
    // A tampered export: findings, exit 1.
    let export = pmm.run("pmm-export", &["--format", "jsonl"], "").stdout;
    let tampered = export.replacen("event 5 ", "event five ", 1);
    assert_ne!(tampered, export);
    std::fs::write(pmm.path("tampered.jsonl"), &tampered).unwrap();
    let r = assert_same(&pmm, "verify", &["tampered.jsonl"], "");
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.findings(),
        [(serde_json::json!(6), "hash_mismatch".into())]
    );
    // stdin reaches the program.
    let r = assert_same(&pmm, "verify", &["-"], &export);
    assert_eq!(r.code, 0, "{r:?}");
    // A missing ledger: the program's own one-line error, exit 2.
    let r = assert_same(&pmm, "verify", &["--db", "missing.db"], "");
    r.assert_error("pmm-verify", &["missing.db"]);
}

#[test]
fn arguments_reach_the_program_untouched() {
    let pmm = Pmm::new();
    // Words that pmm would otherwise take for its own: --help, --version, --, help.
    let content = "--help -- --version help ünïcode";
    let r = pmm.run(
        "pmm",
        &[
            "append",
            "--kind",
            "user_message",
            &format!("--content={content}"),
            "--meta",
            r#"{"role":"user"}"#,
        ],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.records()[0]["content"], content);
    // A program's --help and --version are its own.
    assert_same(&pmm, "append", &["--help"], "");
    let r = assert_same(&pmm, "replay", &["--version"], "");
    assert!(r.stdout.starts_with("pmm-replay "), "{r:?}");
    // A bad flag is the program's usage error.
    let r = assert_same(&pmm, "graph", &["--no-such-flag"], "");
    r.assert_error("pmm-graph", &["--no-such-flag"]);
}

#[test]
fn help_program_is_the_programs_own_help() {
    let pmm = Pmm::new();
    for (short, full, _) in programs() {
        let front = pmm.run("pmm", &["help", &short], "");
        let direct = pmm.run(&full, &["--help"], "");
        assert_eq!(front.code, 0, "{front:?}");
        assert_eq!(front.stdout, direct.stdout, "pmm help {short}");
    }
    let r = pmm.run("pmm", &["help", "nope"], "");
    r.assert_error("pmm", &["nope", "verify", "append"]);
}

#[test]
fn model_failure_exit_3_passes_through() {
    let pmm = Pmm::new();
    let out = pmm
        .cmd("pmm")
        .env("OLLAMA_HOST", Stub::down_url())
        .args(["turn", "--adapter", "ollama", "--retries", "0", "hello?"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("pmm-turn: error: "), "{stderr}");
}

/// `pmm` becomes the program (exec): the process is the program's, and a signal sent to it
/// reaches the program (pmm-replay --follow ends cleanly with 0 on SIGTERM; a pmm waiting
/// for a child would die of it instead).
#[test]
fn pmm_becomes_the_program_and_signals_reach_it() {
    let pmm = Pmm::new();
    pmm.seed(2);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("pmm"))
        .args(["replay", "--follow", "--tail", "0"])
        .env("PMM_DB", &pmm.db)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = pmm.run(
        "pmm-append",
        &["--kind", "user_message", "--content", "late news"],
        "",
    );
    assert_eq!(r.code, 0, "{r:?}");
    // Seeing the new event means the program is in its follow loop, its handlers set.
    let line = lines.next().unwrap().unwrap();
    assert!(line.contains("late news"), "{line}");
    if cfg!(target_os = "linux") {
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap();
        assert_eq!(comm.trim(), "pmm-replay", "pmm did not exec the program");
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn an_unknown_program_is_exit_2_with_the_program_list() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm", &["nope", "--db", "x.db"], "");
    let mut needles = vec!["'nope' is not a pmm program"];
    let names = programs();
    needles.extend(names.iter().map(|(short, _, _)| short.as_str()));
    r.assert_error("pmm", &needles);
    assert!(r.stdout.is_empty());
    assert!(!pmm.path("x.db").exists());
    // A flag pmm does not have is a usage error too.
    let r = pmm.run("pmm", &["--db", "x.db"], "");
    r.assert_error("pmm", &["--db"]);
    // So is a missing or unknown SHELL.
    pmm.run("pmm", &["completions"], "")
        .assert_error("pmm", &["SHELL"]);
    pmm.run("pmm", &["completions", "tcsh"], "")
        .assert_error("pmm", &["tcsh", "bash"]);
}

#[test]
fn no_arguments_prints_the_help_on_stderr_and_exits_2() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm", &[], "");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
    for (short, _, _) in programs() {
        assert!(r.stderr.contains(&short), "{short} missing: {}", r.stderr);
    }
    assert!(r.stderr.contains("Usage: pmm <PROGRAM>"), "{}", r.stderr);
}

#[test]
fn help_lists_every_program_with_its_summary() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm", &["--help"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.is_empty());
    for (short, _, cmd) in programs() {
        let about = cmd.get_about().unwrap().to_string();
        let start: String = about.chars().take(30).collect();
        let line = r
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{short} ")))
            .unwrap_or_else(|| panic!("pmm --help does not list {short}:\n{}", r.stdout));
        assert!(
            line.contains(&start),
            "{short}: {line:?} lacks its summary {start:?}"
        );
    }
    for needle in [
        "completions",
        "help",
        "--version",
        "pmm completions bash",
        "pmm help turn",
        "PATH",
    ] {
        assert!(r.stdout.contains(needle), "pmm --help lacks {needle}");
    }
    let r = pmm.run("pmm", &["help"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("EXIT STATUS:"), "{r:?}");
    let r = pmm.run("pmm", &["--version"], "");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout.trim(),
        format!("pmm {}", env!("CARGO_PKG_VERSION"))
    );
}

/// Every program's `--help`, pmm's included, has the sections of STYLE habit 10.
#[test]
fn every_programs_help_has_examples_exit_status_and_environment() {
    let pmm = Pmm::new();
    let names = std::iter::once("pmm".to_string()).chain(programs().into_iter().map(|p| p.1));
    for name in names {
        let r = pmm.run(&name, &["--help"], "");
        assert_eq!(r.code, 0, "{name}: {r:?}");
        for section in ["EXAMPLES:", "EXIT STATUS:", "ENVIRONMENT:", "PMM_DB"] {
            assert!(r.stdout.contains(section), "{name} --help lacks {section}");
        }
        assert!(!pmm.db.exists(), "{name} --help opened a ledger");
    }
}

/// Runs `bash -c script` in the workspace.
fn bash(pmm: &Pmm, script: &str) -> Run {
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(pmm.dir.path())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("bash");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn bash_completions_cover_pmm_and_every_program_and_parse() {
    let pmm = Pmm::new();
    let r = pmm.run("pmm", &["completions", "bash"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let script = &r.stdout;
    for (short, full, cmd) in programs() {
        assert!(script.contains(&short), "no {short}");
        assert!(
            script.contains(&format!(" {full}\n")),
            "no complete line for {full}"
        );
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(script.contains(&format!("--{long}")), "{full}: no --{long}");
            }
        }
    }
    std::fs::write(pmm.path("pmm.bash"), script).unwrap();
    let r = bash(&pmm, "bash -n pmm.bash");
    assert_eq!(r.code, 0, "bash -n rejects the script: {r:?}");
    // Sourced, it completes pmm's programs, their flags, and each pmm-* program.
    let r = bash(
        &pmm,
        r#"source pmm.bash
           complete -p | sed 's/.* //' | sort | tr '\n' ' '; echo
           COMP_WORDS=(pmm ver); COMP_CWORD=1; _pmm pmm ver pmm; echo "${COMPREPLY[*]}"
           COMP_WORDS=(pmm verify --anc); COMP_CWORD=2; _pmm pmm --anc verify; echo "${COMPREPLY[*]}"
           COMP_WORDS=(pmm help tu); COMP_CWORD=2; _pmm pmm tu help; echo "${COMPREPLY[*]}""#,
    );
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let mut expected: Vec<String> = programs().into_iter().map(|p| p.1).collect();
    expected.push("pmm".into());
    expected.sort();
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), expected);
    assert_eq!(lines[1], "verify");
    assert_eq!(lines[2], "--anchor --anchors-from");
    assert_eq!(lines[3], "turn");
}

#[test]
fn completions_for_every_shell_name_every_program() {
    let pmm = Pmm::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = pmm.run("pmm", &["completions", shell], "");
        assert_eq!(r.code, 0, "{shell}: {r:?}");
        for (_, full, _) in programs() {
            assert!(r.stdout.contains(&full), "{shell}: no {full}");
        }
        let flag = if shell == "fish" { "-l db" } else { "--db" };
        assert!(r.stdout.contains(flag), "{shell}: no flags");
    }
    // PowerShell allows `using` only at the top of a script.
    let ps = pmm.run("pmm", &["completions", "powershell"], "").stdout;
    let first_other = ps
        .lines()
        .position(|l| !l.starts_with("using "))
        .unwrap_or(0);
    assert!(first_other > 0, "no using lines at the top");
    assert!(
        ps.lines()
            .skip(first_other)
            .all(|l| !l.starts_with("using ")),
        "a using statement after the top"
    );
}

/// A copy of the pmm binary alone in a directory (so nothing is beside it), hard-linked
/// when the file system allows.
fn lone_pmm(dir: &Path) -> PathBuf {
    let src = assert_cmd::cargo::cargo_bin("pmm");
    let dst = dir.join("pmm");
    if std::fs::hard_link(&src, &dst).is_err() {
        std::fs::copy(&src, &dst).unwrap();
    }
    dst
}

#[test]
fn a_known_program_that_is_not_installed_is_exit_2_and_path_is_searched() {
    let pmm = Pmm::new();
    pmm.seed(3);
    // In the target directory so that a hard link works (same file system).
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = lone_pmm(alone.path());
    let empty = pmm.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let run = |path: &Path, args: &[&str]| {
        let out = Command::new(&exe)
            .args(args)
            .current_dir(pmm.dir.path())
            .env("PATH", path)
            .env("PMM_DB", &pmm.db)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    let r = run(&empty, &["verify"]);
    r.assert_error("pmm", &["pmm-verify is not installed", "PATH"]);
    assert!(r.stdout.is_empty());
    // pmm help PROGRAM needs the program too.
    run(&empty, &["help", "verify"]).assert_error("pmm", &["pmm-verify is not installed"]);
    // Its own help and completions do not.
    assert_eq!(run(&empty, &["--help"]).code, 0);
    assert_eq!(run(&empty, &["completions", "bash"]).code, 0);
    // Found on PATH instead.
    let bin_dir = assert_cmd::cargo::cargo_bin("pmm-verify");
    let r = run(bin_dir.parent().unwrap(), &["verify", "--quiet"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.summary()["events"], 3);
}

/// The scripts a user runs (README, docs) teach with `--help` and refuse an argument they do not
/// know with exit 2 before doing any work (no build, no download, no ledger).
#[test]
fn scripts_answer_help_and_refuse_unknown_arguments() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    for name in [
        "demo.sh",
        "bench.sh",
        "scale-proof.sh",
        "e2e-real-model.sh",
        "fuzz.sh",
        "ci-verify.sh",
        "recall-bench",
    ] {
        let run = |arg: &str| {
            // Shell scripts through bash; the others (Python) run as the executables they are.
            let mut cmd = if name.ends_with(".sh") {
                let mut c = Command::new("bash");
                c.arg(scripts.join(name));
                c
            } else {
                Command::new(scripts.join(name))
            };
            let out = cmd
                .arg(arg)
                .env_remove("PMM_BIN")
                .current_dir(std::env::temp_dir())
                .stdin(Stdio::null())
                .output()
                .expect("run bash");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (code, stdout, _) = run("--help");
        assert_eq!(code, Some(0), "{name} --help");
        assert!(stdout.contains("Usage"), "{name} --help: {stdout}");
        let (code, _, stderr) = run("--no-such-option");
        assert_eq!(code, Some(2), "{name} --no-such-option: {stderr}");
        assert!(stderr.contains("--no-such-option"), "{name}: {stderr}");
    }
}
