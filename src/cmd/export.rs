//! pmm-export
