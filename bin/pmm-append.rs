//! `pmm-append`: see `pmm-append --help` and man/pmm-append.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-append", pmm::cmd::append::run)
}

pmm::global_allocator!();
