//! `pmm-mcp`: see `pmm-mcp --help` and man/pmm-mcp.1.
fn main() -> std::process::ExitCode {
    pmm::cli::main("pmm-mcp", pmm::cmd::mcp::run)
}

pmm::global_allocator!();
