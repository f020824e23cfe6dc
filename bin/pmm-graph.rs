//! `pmm-graph`: see `pmm-graph --help` and man/pmm-graph.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-graph", pmm::cmd::graph::run)
}

pmm::global_allocator!();
