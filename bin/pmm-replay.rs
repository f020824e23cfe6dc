//! `pmm-replay`: see `pmm-replay --help` and man/pmm-replay.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-replay", pmm::cmd::replay::run)
}

pmm::global_allocator!();
