//! pmm-metrics
