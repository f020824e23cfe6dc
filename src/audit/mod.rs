//! Checks that recompute across layers: deep verification recomputes every derived event from
//! its inputs with the same library functions the writers use (the turn's, the kernel's, the
//! projections'), so it sits above all of them, and nothing below imports it. Inclusion proofs
//! of single events ([`prove`]) read the store's tree for `pmm-verify` and the MCP server alike.

pub mod adaptive;
pub mod checkpoint;
pub mod deep;
pub mod goals;
pub mod indexed;
pub mod metrics;
pub mod prompts;
pub mod prove;
pub mod retention;
pub mod verify;
