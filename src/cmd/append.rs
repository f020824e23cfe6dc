//! pmm-append
