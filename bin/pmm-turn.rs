//! `pmm-turn`: see `pmm-turn --help` and man/pmm-turn.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-turn", pmm::cmd::turn::run)
}

pmm::global_allocator!();
