//! Readers of dataset files into prompts (D20, D26): ShareGPT, custom JSONL and vLLM's
//! other file formats ([`files`], [`vllm_files`]), timed and session traces ([`trace`]),
//! audio files ([`audio_files`]). Plain functions of a path and options, read once at plan
//! time; which reader a run uses is the plan's (`cli::dataset`).

pub mod audio_files;
pub mod files;
pub mod trace;
pub mod vllm_files;
pub mod weka;
