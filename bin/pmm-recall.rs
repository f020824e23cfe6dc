//! `pmm-recall`: see `pmm-recall --help` and man/pmm-recall.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-recall", pmm::cmd::recall::run)
}

pmm::global_allocator!();
