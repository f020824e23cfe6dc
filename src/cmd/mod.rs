//! One module per program: clap `Args` (whose doc comments are the help) and `run`.

pub mod append;
pub mod export;
pub mod front;
pub mod graph;
pub mod mcp;
pub mod metrics;
pub mod recall;
pub mod replay;
pub mod tick;
pub mod turn;
pub mod verify;

/// Every program's clap command, for man pages and completions.
pub fn commands() -> Vec<clap::Command> {
    use clap::CommandFactory;
    vec![
        append::Args::command(),
        export::Args::command(),
        graph::Args::command(),
        mcp::Args::command(),
        metrics::Args::command(),
        recall::Args::command(),
        replay::Args::command(),
        tick::Args::command(),
        turn::Args::command(),
        verify::Args::command(),
    ]
}
