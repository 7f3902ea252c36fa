//! What the requests say: the prompt of request `i` of a run as a pure function of the
//! dataset spec, the run's tokenizer and `i` ([`dataset`]), exact-length random text
//! ([`synth`]), the local tokenizer that counts tokens ([`tokenizer`]) and which request
//! indices an agent's share holds ([`share`]).
//!
//! Knows nothing of HTTP, of the engine or of the coordinator: the engine asks it for a
//! slice of prompts, the coordinator for token counts of file datasets.

pub mod answers;
pub mod dataset;
pub mod images;
pub mod share;
pub mod synth;
pub mod tokenizer;
pub mod turns;
