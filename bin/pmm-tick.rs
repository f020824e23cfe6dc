//! `pmm-tick`: see `pmm-tick --help` and man/pmm-tick.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-tick", pmm::cmd::tick::run)
}

pmm::global_allocator!();
