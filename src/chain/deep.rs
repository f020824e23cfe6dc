//! Deep verification of derived events (being written).
