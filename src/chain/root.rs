//! Checkpoint root hashes (being written).
