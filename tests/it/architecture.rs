//! The module table of docs/architecture.md is the real dependency graph: recomputed here from
//! the sources (every `crate::<module>` a module's code names, outside comments and tests), it
//! must match the table, and no module may use one of a higher layer. The page's rule of who
//! speaks SQL, to the network, on stdio and to files is checked the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Same-layer uses the table allows (and says why).
const SAME_LAYER: [(&str, &str); 2] = [("context", "recall"), ("audit", "kernel")];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate's top-level modules: `src/<name>/` and `src/<name>.rs` (not `lib.rs`).
fn modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs")
                    .filter(|n| *n != "lib")
                    .map(str::to_string)
            }
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The lines of module `m`'s code: outside comments, `#[cfg(test)]` and `tests.rs`.
fn code_lines(m: &str) -> Vec<String> {
    let mut files = Vec::new();
    let dir = src().join(m);
    if dir.is_dir() {
        rust_files(&dir, &mut files);
    } else {
        files.push(src().join(format!("{m}.rs")));
    }
    files.iter().flat_map(|f| file_code_lines(f)).collect()
}

/// The lines of one source file's code: outside comments and `#[cfg(test)]`.
fn file_code_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .map(str::to_string)
        .collect()
}

/// Every source file of `src/` (its path under `src/`, `/`-separated) with its code lines
/// (outside comments, `#[cfg(test)]` and `tests.rs`).
pub(crate) fn code_by_file() -> Vec<(String, Vec<String>)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src()).unwrap_or(f);
            let name = rel.to_string_lossy().replace('\\', "/");
            (name, file_code_lines(f))
        })
        .collect()
}

/// What module `m`'s code uses: `crate::<other module>` outside comments and `#[cfg(test)]`.
fn uses(m: &str, all: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in code_lines(m) {
        for (i, _) in line.match_indices("crate::") {
            let name: String = line[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name != m && all.contains(&name) {
                found.insert(name);
            }
        }
    }
    found
}

/// The table: module → (layer, what it depends on).
fn table() -> BTreeMap<String, (u32, BTreeSet<String>)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let mut rows = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 4 {
            continue;
        }
        let Ok(layer) = cells[1].parse::<u32>() else {
            continue;
        };
        let name = cells[0].trim_matches('`').to_string();
        let deps = cells[3]
            .split(',')
            .map(|d| d.trim().trim_matches('`').to_string())
            .filter(|d| !d.is_empty() && d != "—")
            .collect();
        rows.insert(name, (layer, deps));
    }
    rows
}

#[test]
fn the_architecture_table_is_the_real_dependency_graph() {
    let all = modules();
    let table = table();
    let listed: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        listed, all,
        "docs/architecture.md must list every module of src/"
    );
    let mut wrong = Vec::new();
    for m in &all {
        let real = uses(m, &all);
        let (layer, said) = &table[m];
        if &real != said {
            wrong.push(format!(
                "{m}: the code uses {real:?}, the table says {said:?}"
            ));
        }
        for d in &real {
            let dl = table[d].0;
            let allowed =
                dl < *layer || (dl == *layer && SAME_LAYER.contains(&(m.as_str(), d.as_str())));
            if !allowed {
                wrong.push(format!("{m} (layer {layer}) uses {d} (layer {dl})"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/architecture.md: "Only `store` speaks SQL, only `llm` speaks to the network as a client
/// and only `mcp::http` serves it, only `cli`
/// and `cmd` write to stdout and stderr or choose the exit code", and the few modules that
/// touch files besides the ledger are named.
#[test]
fn only_the_named_modules_speak_sql_network_stdio_and_files() {
    let rules: [(&str, &[&str], &[&str]); 5] = [
        // `error` only names SQLite's error type, in the variant that carries it.
        ("SQL", &["rusqlite::"], &["store", "error"]),
        // `mcp` serves it (`mcp::http`, pmm-mcp --http); `llm` calls out.
        (
            "the network",
            &["ureq::", "std::net", "tokio::net", "TcpListener"],
            &["llm", "mcp"],
        ),
        (
            "stdout, stderr or the exit code",
            &[
                "println!",
                "print!(",
                "eprintln!",
                "eprint!(",
                "stdout()",
                "stderr()",
                "process::exit",
            ],
            &["cli", "cmd"],
        ),
        ("stdin", &["stdin()"], &["cli", "cmd", "interchange"]),
        // `session` reads a `REF:` target (`session::reference`), read-only; `claim` does no I/O.
        (
            "files",
            &["std::fs", "fs::", "File::"],
            &[
                "cli",
                "cmd",
                "store",
                "interchange",
                "outfile",
                "llm",
                "session",
            ],
        ),
    ];
    let mut wrong = Vec::new();
    for m in &modules() {
        let lines = code_lines(m);
        for (what, needles, allowed) in &rules {
            if allowed.contains(&m.as_str()) {
                continue;
            }
            for line in &lines {
                if needles.iter().any(|n| line.contains(n)) {
                    wrong.push(format!("{m} touches {what}: {line}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Inside `store`, SQL lives only in the backends (`store/sqlite/`, `store/postgres/`): the
/// event log's traits, their contract suite and the PostgreSQL replica name no database API
/// and write no statement of their own.
#[test]
fn inside_the_store_only_the_backends_speak_sql() {
    let store = src().join("store");
    let mut files = Vec::new();
    rust_files(&store, &mut files);
    let needles = [
        "rusqlite", "SELECT ", "INSERT ", "UPDATE ", "DELETE ", "CREATE ", "execute(",
    ];
    let mut wrong = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&store).unwrap();
        if rel.starts_with("sqlite") || rel.starts_with("postgres") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            if needles.iter().any(|n| line.contains(n)) {
                wrong.push(format!("store/{}: {line}", rel.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A program's module never uses another program's: what two programs share lives in the
/// library (`cli` for flags and renderers, `audit`, `kernel`, …), not in `cmd`.
#[test]
fn commands_never_import_commands() {
    let cmd = src().join("cmd");
    let programs: BTreeSet<String> = std::fs::read_dir(&cmd)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let name = name.strip_suffix(".rs").unwrap_or(&name).to_string();
            (name != "mod").then_some(name)
        })
        .collect();
    let mut wrong = Vec::new();
    for program in &programs {
        let mut files = Vec::new();
        let dir = cmd.join(program);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(cmd.join(format!("{program}.rs")));
        }
        for f in files {
            // `super::` from the program's own top file, `super::super::` from a file below it.
            let top = f.file_name().is_some_and(|n| n == "mod.rs") || f.parent() == Some(&cmd);
            let up = if top { "super::" } else { "super::super::" };
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
                for other in programs.iter().filter(|o| *o != program) {
                    let via_super = format!("{up}{other}");
                    let via_crate = format!("crate::cmd::{other}");
                    let names = |p: &str| {
                        line.match_indices(p).any(|(i, _)| {
                            !line[i + p.len()..]
                                .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                                && (i == 0
                                    || !line[..i].ends_with(|c: char| {
                                        c.is_alphanumeric() || c == '_' || c == ':'
                                    }))
                        })
                    };
                    if names(&via_super) || names(&via_crate) {
                        wrong.push(format!("cmd/{program} uses cmd/{other}: {line}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Lines a source file may have before its test module.
const MAX_FILE_LINES: usize = 1_000;
/// Lines a function may have, signature and closing brace included.
const MAX_FN_LINES: usize = 80;

/// Every source file of `src/`: its path under `src/` and its lines before its test module
/// (`#[cfg(test)]`).
fn sized_files() -> Vec<(String, Vec<String>)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(f).unwrap();
            let lines = text
                .lines()
                .take_while(|l| l.trim() != "#[cfg(test)]")
                .map(str::to_string)
                .collect();
            (rel, lines)
        })
        .collect()
}

/// The name of the function whose signature starts on `line`, if one does (`fn`, after any
/// of `pub`, `pub(…)`, `const`, `async`, `unsafe`, `extern "C"`).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for word in ["pub ", "const ", "async ", "unsafe ", "extern \"C\" "] {
            rest = rest.strip_prefix(word).unwrap_or(rest);
        }
        if rest.starts_with("pub(") {
            rest = rest.split_once(") ").map_or(rest, |(_, r)| r);
        }
        if rest == before {
            break;
        }
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// Functions of `lines` longer than [`MAX_FN_LINES`]: `(first line, length, name)`. A body
/// ends at the first line after its signature that is a `}` at the signature's indentation
/// (rustfmt's layout); a signature that ends in `;` has none.
fn long_functions(lines: &[String]) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) else {
            continue;
        };
        let len = end - i + 1;
        if len > MAX_FN_LINES {
            found.push((i + 1, len, name.to_string()));
        }
    }
    found
}

/// Issue 47: no file of `src/` is over [`MAX_FILE_LINES`] lines before its test module, and
/// no function over [`MAX_FN_LINES`] lines (tests included, where they come before the test
/// module); what is longer is split by concern or into named stages.
#[test]
fn no_file_over_1000_lines_and_no_function_over_80() {
    let mut wrong = Vec::new();
    for (path, lines) in sized_files() {
        if lines.len() > MAX_FILE_LINES {
            wrong.push(format!(
                "src/{path}: {} lines before its tests (at most {MAX_FILE_LINES})",
                lines.len()
            ));
        }
        for (at, len, name) in long_functions(&lines) {
            wrong.push(format!(
                "src/{path}:{at}: fn {name} is {len} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The store sits below what it stores for: its code never reaches up into the write session,
/// a turn, the kernel, recall or the folds (issue 47): it keeps a projection checkpoint's
/// bytes, and `projection::checkpoint` decides what they are and what to fold from them.
#[test]
fn the_store_imports_nothing_above_it() {
    let above = ["session", "turn", "kernel", "recall", "projection"];
    let mut wrong = Vec::new();
    for (file, lines) in code_by_file() {
        if !file.starts_with("store/") {
            continue;
        }
        for line in &lines {
            for m in above {
                if line.contains(&format!("crate::{m}::"))
                    || line.contains(&format!("crate::{m}}}"))
                {
                    wrong.push(format!("{file}: {line}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The function finder of the size rule finds what it must: a long function, nested or not,
/// and no body for a declaration.
#[test]
fn the_size_rule_measures_functions_by_their_braces() {
    let body = |indent: &str, n: usize| -> Vec<String> {
        let mut v = vec![format!("{indent}pub(crate) fn long(x: u8) -> u8 {{")];
        v.extend((0..n).map(|_| format!("{indent}    let _ = x;")));
        v.push(format!("{indent}}}"));
        v
    };
    let mut lines = vec!["fn declared(&self);".to_string()];
    lines.extend(body("", 79));
    lines.extend(body("    ", 78));
    lines.push("impl X {".to_string());
    lines.extend(body("    ", 40));
    lines.push("}".to_string());
    assert_eq!(
        long_functions(&lines),
        vec![(2, 81, "long".to_string())],
        "81 lines is one too many; 80 is allowed"
    );
    assert_eq!(fn_name("    pub async unsafe fn go<T>() {"), Some("go"));
    assert_eq!(fn_name("let f = fn_name;"), None);
}

/// The PostgreSQL backend names nothing of the SQLite one (issue 47): not its module, not its
/// driver. The host's cache of a PostgreSQL ledger, which holds both, is `store/replica`.
#[test]
fn the_postgres_backend_names_nothing_of_sqlite() {
    let mut wrong = Vec::new();
    for (file, lines) in code_by_file() {
        if !file.starts_with("store/postgres/") {
            continue;
        }
        for line in &lines {
            if line.contains("sqlite") {
                wrong.push(format!("{file}: {line}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The SQLite backend names nothing of PostgreSQL or of the host cache built on it (issue
/// 47): a ledger file does not know it may be a server's cache (`store::replica::Cached` wraps
/// it). `pmm_replica`, a table of a cache file, is a name in the file, not an import.
#[test]
fn the_sqlite_backend_names_nothing_of_postgres_or_the_replica() {
    let mut wrong = Vec::new();
    for (file, lines) in code_by_file() {
        if !file.starts_with("store/sqlite/") {
            continue;
        }
        for line in &lines {
            let code = line.replace("pmm_replica", "");
            if code.contains("postgres") || code.contains("replica") {
                wrong.push(format!("{file}: {line}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Nothing outside the store names a backend's module (issue 47): programs open ledgers
/// through `store::Ledger` and the store's own functions (`store::open`'s URL helpers), so
/// that a backend can change without touching them.
#[test]
fn nothing_outside_the_store_names_a_backends_module() {
    let mut wrong = Vec::new();
    for (file, lines) in code_by_file() {
        if file.starts_with("store/") {
            continue;
        }
        for line in &lines {
            let named = store_items(line);
            if named.iter().any(|m| m == "sqlite" || m == "postgres") {
                wrong.push(format!("{file}: {line}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The names `line` takes from `store::`: the one after it, or those of the braces after it
/// (`store::{a, b::c}` gives `a`, `b`).
fn store_items(line: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in line.match_indices("store::") {
        let rest = &line[i + "store::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = group.split('}').next().unwrap_or("");
                out.extend(group.split(',').map(|p| ident(p.trim())));
            }
            None => out.push(ident(rest)),
        }
    }
    out
}

/// The finder of a store import sees a module named alone, in a path or in braces, and not
/// an item whose name starts like one.
#[test]
fn the_backend_rule_finds_every_form_of_a_store_import() {
    assert_eq!(store_items("use crate::store::sqlite;"), ["sqlite"]);
    assert_eq!(
        store_items("crate::store::postgres::url::shown(u)"),
        ["postgres"]
    );
    assert_eq!(
        store_items("use crate::store::{log::EventLog, postgres};"),
        ["log", "postgres"]
    );
    assert_eq!(
        store_items("crate::store::sqlite_check(&l)"),
        ["sqlite_check"]
    );
}
