//! Retrieval and context: the hash64 embedding, the retrieval-selection digest, which events a
//! turn shows the model ([`select`]), and the context block and system prompt ([`render`]).

pub mod embed;
pub mod prompt;
pub mod render;
pub mod retrieval;
pub mod select;
