//! `pmm-export`: see `pmm-export --help` and man/pmm-export.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-export", pmm::cmd::export::run)
}

pmm::global_allocator!();
