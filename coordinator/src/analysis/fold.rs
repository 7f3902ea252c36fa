//! One part of a run's analysis, folded as the run goes (D64): it sees every finished
//! request (and, if it wants them, the agents' shares and the server's and the GPUs'
//! scrapes), gives up its exact records when the run passes the exact budget, and at the
//! end makes its part of the result from what it kept and what the whole run came to. The
//! aggregator ([`super::aggregate`]) measures the core (counts, throughput, the latency
//! distributions, the time series) and hands everything to the folds registered in
//! [`super::folds`]; a fold knows neither the others nor where its result goes.

use crate::fleet::outcome::GlobalRow;
use crate::target::gpu::GpuScrape;
use crate::target::scrape::ServerScrape;
use surge_core::data::share::Stripe;

/// The client's numbers the server's are checked against.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientSide {
    pub output_tokens: u64,
    pub ttft_p50_ms: f64,
    pub ttft_mean_ms: f64,
}

/// What the whole run came to, as the core measured it: what a fold's end may read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Whole {
    /// Requests sent (0: the run sent nothing, and most folds have nothing to say).
    pub sends: u64,
    /// vLLM's duration, seconds.
    pub duration_s: f64,
    /// Slices of the time series.
    pub slices: usize,
    pub client: ClientSide,
}

/// A part of the analysis. Every input has a default that ignores it.
pub trait Fold: Send + std::fmt::Debug {
    /// What the fold makes of the run.
    type Out;
    /// A finished request, whatever its outcome.
    fn row(&mut self, _r: &GlobalRow) {}
    /// The agents' shares of the run: (their global indices, how many).
    fn started(&mut self, _slices: &[(Stripe, u64)]) {}
    /// A scrape of the server's metrics.
    fn server(&mut self, _s: &ServerScrape) {}
    /// A scrape of the GPU exporter pages.
    fn gpu(&mut self, _s: &GpuScrape) {}
    /// The run passed the exact budget: keep only what does not grow with it.
    fn drop_exact(&mut self) {}
    /// The fold's result.
    fn finish(self, run: &Whole) -> Self::Out;
}
