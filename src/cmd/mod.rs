//! One module per program: clap `Args` (whose doc comments are the help) and `run`.

/// Every program's clap command, for man pages and completions.
pub fn commands() -> Vec<clap::Command> {
    vec![]
}
