//! `pmm-metrics`: see `pmm-metrics --help` and man/pmm-metrics.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-metrics", pmm::cmd::metrics::run)
}

pmm::global_allocator!();
