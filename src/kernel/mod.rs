//! Autonomy: slots and (with the tick) the decision kernel.

pub mod slot;
