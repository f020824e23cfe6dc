//! Retrieval and context: the hash64 embedding and the retrieval-selection digest (the turn
//! will add retrieval itself and prompt rendering).

pub mod embed;
pub mod retrieval;
