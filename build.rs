//! Marks the fixture tests ignored when the shared fixtures are absent.
//!
//! The reference ledger and the canonical-JSON corpus live next to the package, in
//! `../shared/fixtures`, and are not part of a clone. Without them the fixture tests used to
//! return early and report `ok`, with their "skipping" line hidden by cargo. This script sets
//! `--cfg pmm_no_fixtures` instead, and each fixture test carries
//! `#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]`, so cargo's own summary
//! counts them as ignored and `--include-ignored` shows the reason. With
//! `PMM_REQUIRE_FIXTURES=1` (as CI sets it) the cfg is never set: the tests run and fail when
//! the fixtures are missing.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(pmm_no_fixtures)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=PMM_REQUIRE_FIXTURES");
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default();
    let shared = Path::new(&manifest).join("..").join("shared");
    let fixtures = shared.join("fixtures");
    // Watch only paths that exist: a missing one would make cargo rerun this script, and
    // rebuild the crate, on every build. `../shared` appearing later is not noticed; `touch
    // build.rs` after adding the fixtures there.
    if fixtures.is_dir() {
        println!("cargo::rerun-if-changed={}", fixtures.display());
        return;
    }
    if shared.is_dir() {
        println!("cargo::rerun-if-changed={}", shared.display());
    }
    if std::env::var("PMM_REQUIRE_FIXTURES").as_deref() == Ok("1") {
        return;
    }
    println!("cargo::rustc-cfg=pmm_no_fixtures");
}
