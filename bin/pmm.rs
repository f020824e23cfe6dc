//! `pmm`: runs the pmm-* programs as subcommands; see `pmm --help` and man/pmm.1.
fn main() -> std::process::ExitCode {
    pmm::cmd::front::main()
}

pmm::global_allocator!();
