//! pmm-verify
