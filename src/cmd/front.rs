//! `pmm`: the front program, in the style of git. `pmm verify …` runs `pmm-verify …`; `pmm
//! --help` lists the programs; `pmm completions SHELL` completes all of them.
//!
//! The program list is [`super::commands`], so a program added there appears here (in the
//! help, the completions, the man page and the dispatch) without another change.

use clap::builder::PossibleValuesParser;
use clap::{value_parser, Arg, Command};
use clap_complete::Shell;
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The name the front reports errors under.
const NAME: &str = "pmm";

const EXAMPLES: &str = "\
EXAMPLES:
  A program as a subcommand: pmm PROGRAM ARGS... runs pmm-PROGRAM ARGS... unchanged:
    pmm append --kind user_message --content 'hello' --meta '{\"role\":\"user\"}'
    pmm export --format jsonl | pmm verify -
    pmm replay --state | jq .open_commitments
    pmm verify --deep | tail -1 | jq .deep
  A program's help (the same as pmm-turn --help):
    pmm help turn
  Completions for pmm and every pmm-* program, in this shell:
    source <(pmm completions bash)                        # bash, zsh
    pmm completions fish | source                         # fish
    eval (pmm completions elvish | slurp)                 # elvish
    pmm completions powershell | Out-String | Invoke-Expression
  For every new shell, add the line to ~/.bashrc, ~/.zshrc (after compinit) or
  ~/.config/fish/config.fish.

EXIT STATUS:
  A program's own status, passed through unchanged (pmm becomes the program):
  0  success
  1  the program worked and the answer is negative (findings, a refused write)
  2  bad input, I/O or database error; from pmm itself: no PROGRAM, an unknown PROGRAM, a
     PROGRAM that is not installed, a bad SHELL
  3  an external service (the model) failed

ENVIRONMENT:
  PATH      where pmm-PROGRAM is looked for when it is not in the directory of pmm itself
  PMM_DB    the ledger of every program when --db is not given (default .data/pmmdb/pmm.db)
  The programs' variables (PMM_DB, PMM_NOW, PMM_ADAPTER, PMM_MODEL, OLLAMA_HOST, ...) and a
  .env file in the current directory reach the program unchanged; pmm(7) lists them all.";

/// The programs pmm runs: `(name, command)` with the `pmm-` prefix taken off the name
/// (`verify`), in the order of [`super::commands`].
pub fn programs() -> Vec<(String, Command)> {
    super::commands()
        .into_iter()
        .map(|c| {
            let full = c.get_name().to_string();
            let short = full.strip_prefix("pmm-").unwrap_or(&full).to_string();
            (short, c)
        })
        .collect()
}

/// The program names, comma separated, for error messages.
fn program_list() -> String {
    programs()
        .into_iter()
        .map(|(n, _)| n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `pmm`'s clap command: its help, man page and completions. Each program is a subcommand
/// carrying that program's whole definition (so completions know its flags); dispatch never
/// lets clap parse a program's arguments, which go to the program untouched.
pub fn command() -> Command {
    let progs = programs();
    let names: Vec<String> = progs.iter().map(|(n, _)| n.clone()).collect();
    let see_also = std::iter::once("pmm(7)".to_string())
        .chain(progs.iter().map(|(_, c)| format!("{}(1)", c.get_name())))
        .collect::<Vec<_>>()
        .join(", ");
    let after = format!("{EXAMPLES}\n\nSEE ALSO:\n  {see_also}");
    Command::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .about("Run the pmm programs as subcommands: pmm verify ARGS runs pmm-verify ARGS")
        .long_about(
            "Run the pmm programs as subcommands: pmm verify ARGS runs pmm-verify ARGS\n\n\
             pmm PROGRAM ARGS... runs pmm-PROGRAM with ARGS unchanged, in place of pmm itself \
             (stdin, stdout, stderr, signals and the exit status are the program's). \
             pmm-PROGRAM is looked for in the directory of pmm first, then on PATH. \
             Each program is also a command of its own; see pmm(7) for what they share.",
        )
        .override_usage(
            "pmm <PROGRAM> [ARGS]...\n       pmm help [PROGRAM]\n       pmm completions <SHELL>",
        )
        .subcommand_value_name("PROGRAM")
        .disable_help_subcommand(true)
        .after_long_help(after)
        .subcommands(progs.into_iter().map(|(short, c)| c.name(short)))
        .subcommand(
            Command::new("completions")
                .about("Print shell completions for pmm and every pmm-* program")
                .arg(
                    Arg::new("shell")
                        .value_name("SHELL")
                        .required(true)
                        .value_parser(value_parser!(Shell)),
                ),
        )
        .subcommand(
            Command::new("help")
                .about("Print the help of PROGRAM (pmm-PROGRAM --help), or this help")
                .arg(
                    Arg::new("program")
                        .value_name("PROGRAM")
                        .value_parser(PossibleValuesParser::new(names)),
                ),
        )
}

/// Runs `pmm` with the process's arguments; see [`run_with`].
pub fn main() -> ExitCode {
    run_with(std::env::args_os().collect())
}

/// Runs `pmm` with `argv` (the program name first). Returns only when pmm does not become a
/// program: help, completions, or an error.
pub fn run_with(argv: Vec<OsString>) -> ExitCode {
    let Some(first) = argv.get(1) else {
        // No program: the short help, as a usage error.
        let _ = write!(io::stderr(), "{}", command().render_help());
        return ExitCode::from(2);
    };
    let first_str = first.to_string_lossy();
    if is_program(first) {
        return dispatch(&first_str, &argv[2..]);
    }
    if !first_str.starts_with('-') && first_str != "help" && first_str != "completions" {
        return fail(anyhow::anyhow!(
            "'{first_str}' is not a pmm program; the programs are: {} (see 'pmm --help')",
            program_list()
        ));
    }
    let matches = match command().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => {
            // --help, --version: not errors.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return crate::cli::usage_error(NAME, &e),
    };
    match matches.subcommand() {
        Some(("completions", m)) => match m.get_one::<Shell>("shell") {
            Some(&shell) => {
                let mut out = io::stdout().lock();
                match write_completions(shell, &mut out).and_then(|()| out.flush()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e.into()),
                }
            }
            None => fail(anyhow::anyhow!(
                "completions needs a SHELL (see 'pmm --help')"
            )),
        },
        Some(("help", m)) => match m.get_one::<String>("program") {
            Some(p) => dispatch(p, &[OsString::from("--help")]),
            None => {
                let _ = command().print_long_help();
                ExitCode::SUCCESS
            }
        },
        // Programs were dispatched above, and flags alone end in help or an error.
        _ => {
            let _ = write!(io::stderr(), "{}", command().render_help());
            ExitCode::from(2)
        }
    }
}

/// Reports `e` as `pmm: error: …` with its exit status (2 unless it carries another).
fn fail(e: anyhow::Error) -> ExitCode {
    crate::cli::report(NAME, &e)
}

/// Runs `pmm-<program> args` in place of pmm; returns only if it could not be started.
fn dispatch(program: &str, args: &[OsString]) -> ExitCode {
    let file = format!("pmm-{program}");
    let Some(path) = locate(&file) else {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.display().to_string()))
            .unwrap_or_else(|| "the directory of pmm".into());
        return fail(anyhow::anyhow!(
            "{file} is not installed: it is neither in {beside} nor on PATH"
        ));
    };
    match exec(&path, args) {
        Ok(code) => code,
        Err(e) => fail(anyhow::Error::new(e).context(format!("cannot run {}", path.display()))),
    }
}

/// Replaces this process with `path args` (Unix: signals and the exit status are the
/// program's own). Returns only on failure.
#[cfg(unix)]
fn exec(path: &Path, args: &[OsString]) -> io::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    Err(std::process::Command::new(path).args(args).exec())
}

/// Runs `path args` and passes its exit status on (no `exec` outside Unix).
#[cfg(not(unix))]
fn exec(path: &Path, args: &[OsString]) -> io::Result<ExitCode> {
    let status = std::process::Command::new(path).args(args).status()?;
    Ok(ExitCode::from(status.code().unwrap_or(2) as u8))
}

/// Where `file` (`pmm-verify`) is: in the directory of the running pmm, else the first
/// executable of that name in a PATH directory.
pub fn locate(file: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(file)));
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        // An empty PATH entry means the current directory to a shell; a program found there
        // would be whatever the current directory holds, so it is not looked at.
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(file));
    beside.into_iter().chain(on_path).find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Writes the completion scripts of `pmm` and of every `pmm-*` program for `shell`, one after
/// the other, as one script to source.
pub fn write_completions(shell: Shell, out: &mut dyn Write) -> io::Result<()> {
    let mut scripts = vec![(NAME.to_string(), command())];
    scripts.extend(
        super::commands()
            .into_iter()
            .map(|c| (c.get_name().to_string(), c)),
    );
    // PowerShell allows `using` statements only at the top of a script: say each once, first.
    let mut head: Vec<String> = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    for (name, mut cmd) in scripts {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, name, &mut script);
        if shell == Shell::PowerShell {
            let text = String::from_utf8_lossy(&script);
            for line in text.lines() {
                if line.starts_with("using ") {
                    if !head.iter().any(|h| h == line) {
                        head.push(line.to_string());
                    }
                } else {
                    body.extend_from_slice(line.as_bytes());
                    body.push(b'\n');
                }
            }
        } else {
            body.extend_from_slice(&script);
        }
    }
    for line in &head {
        writeln!(out, "{line}")?;
    }
    out.write_all(&body)
}

/// True when `arg` names a program pmm runs (`verify`).
pub fn is_program(arg: &OsStr) -> bool {
    programs().iter().any(|(n, _)| OsStr::new(n) == arg)
}
