//! `pmm-verify`: see `pmm-verify --help` and man/pmm-verify.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-verify", pmm::cmd::verify::run)
}

pmm::global_allocator!();
