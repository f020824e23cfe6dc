//! Markers in a model reply (being written).
