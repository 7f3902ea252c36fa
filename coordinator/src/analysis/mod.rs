//! From what the fleet delivered to numbers: the merge of every agent's rows into
//! `vllm bench serve`'s metrics, exact statistics, statistics across repeated runs, the
//! knee of a sweep, where token counts came from, and the client-bound verdict.

pub mod accuracy;
pub mod active;
pub mod agent_loop;
pub mod aggregate;
pub mod anomalies;
pub mod capacity;
pub mod coalesce;
pub mod compare;
pub mod conversations;
pub mod cost;
pub mod dist;
pub mod endpoints;
pub mod fold;
pub mod folds;
pub mod gpu;
pub mod graphs;
pub mod grid;
pub mod interval;
pub mod knee;
pub mod metrics;
pub mod monitor;
pub mod phases;
pub mod precision;
pub mod ramp;
pub mod reasoning;
pub mod repeat;
pub mod replicas;
pub mod sample;
pub mod saturation;
pub mod seconds;
pub mod server;
pub mod spilled;
pub mod stats;
pub mod steady;
pub mod timeseries;
pub mod token_source;
pub mod verdict;
