//! A run's endpoints (D69): the replicas a workload names, each with its connections and
//! request template, and the policy that gives each request one of them. A workload
//! without a list has one endpoint, its base URL, and every request goes there.
//!
//! The policies, each applied by an agent to its own share:
//! - round-robin: in this agent's send order, over a smooth weighted cycle (nginx's
//!   algorithm: weights 2 and 1 give a, b, a, a, b, a, ...);
//! - random: a weighted draw per send, seeded by the workload's pacing seed;
//! - least-in-flight: the endpoint with the fewest of this agent's requests in flight per
//!   unit of weight, ties taken in turn;
//! - session: the highest weighted rendezvous hash of the session (a request without one:
//!   of its index), so a conversation's turns all go to one endpoint, the same on every
//!   agent, and a changed list moves only the sessions of the endpoints that changed.

use crate::engine::load::pool::Pool;
use crate::engine::load::request::RequestTemplate;
use crate::engine::workload::spec::SpecError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use surge_proto::{EndpointPolicy, Workload};

/// How a request picks its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    RoundRobin,
    Random,
    LeastInFlight,
    Session,
}

impl Policy {
    /// The workload's policy; an unknown value is refused (unset is round-robin).
    pub fn of(w: &Workload) -> Result<Self, SpecError> {
        let p = EndpointPolicy::try_from(w.endpoint_policy)
            .map_err(|_| SpecError::Unknown { field: "endpoint_policy", value: w.endpoint_policy })?;
        Ok(match p {
            EndpointPolicy::Unspecified | EndpointPolicy::RoundRobin => Policy::RoundRobin,
            EndpointPolicy::Random => Policy::Random,
            EndpointPolicy::LeastInFlight => Policy::LeastInFlight,
            EndpointPolicy::Session => Policy::Session,
        })
    }
}

/// The base URLs and weights of a workload: its list, or its base URL alone.
pub fn urls(w: &Workload) -> Vec<(String, u32)> {
    if w.endpoints.is_empty() {
        return vec![(w.base_url.clone(), 1)];
    }
    w.endpoints.iter().map(|e| (e.base_url.clone(), e.weight.max(1))).collect()
}

/// Most entries of the round-robin cycle: weights are reduced by their common divisor,
/// and beyond this the cycle is scaled down (keeping every endpoint in it).
const CYCLE_MAX: u64 = 4096;

/// One endpoint: its connections, its template, its requests in flight from here.
#[derive(Debug)]
pub struct Endpoint {
    pub pool: Arc<Pool>,
    pub tpl: Arc<RequestTemplate>,
    weight: u32,
    in_flight: AtomicU32,
}

/// The run's endpoints and its policy.
#[derive(Debug)]
pub struct Endpoints {
    list: Vec<Endpoint>,
    policy: Policy,
    /// Round-robin: endpoint indices in smooth weighted order.
    cycle: Vec<u32>,
    /// Sends so far (round-robin's position, random's draw, least-in-flight's tie turn).
    next: AtomicU64,
    seed: u64,
}

/// An endpoint's share of a request in flight, given back when dropped.
#[derive(Debug)]
pub struct Lease<'a> {
    endpoint: &'a Endpoint,
    pub index: u32,
}

impl Lease<'_> {
    pub fn endpoint(&self) -> &Endpoint {
        self.endpoint
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.endpoint.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// splitmix64: a well-mixed 64-bit hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A uniform draw in (0, 1] from a hash.
fn unit(h: u64) -> f64 {
    ((h >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// nginx's smooth weighted round-robin over `weights`, one full cycle.
fn smooth_cycle(weights: &[u32]) -> Vec<u32> {
    let g = weights.iter().fold(0u64, |g, &w| gcd(g, u64::from(w)));
    let mut w: Vec<u64> = weights.iter().map(|&x| u64::from(x) / g.max(1)).collect();
    let total: u64 = w.iter().sum();
    if total > CYCLE_MAX {
        w.iter_mut().for_each(|x| *x = (*x * CYCLE_MAX / total).max(1));
    }
    let total: i64 = w.iter().sum::<u64>() as i64;
    let mut current = vec![0i64; w.len()];
    let mut cycle = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, c) in current.iter_mut().enumerate() {
            *c += w[i] as i64;
        }
        for i in 1..w.len() {
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        cycle.push(best as u32);
    }
    cycle
}

impl Endpoints {
    /// `list`: each endpoint's pool, template and weight, in the workload's order.
    pub fn new(list: Vec<(Arc<Pool>, Arc<RequestTemplate>, u32)>, policy: Policy, seed: u64) -> Self {
        let weights: Vec<u32> = list.iter().map(|e| e.2.max(1)).collect();
        let list = list
            .into_iter()
            .map(|(pool, tpl, weight)| Endpoint { pool, tpl, weight: weight.max(1), in_flight: AtomicU32::new(0) })
            .collect();
        Self { list, policy, cycle: smooth_cycle(&weights), next: AtomicU64::new(0), seed }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, i: usize) -> &Endpoint {
        &self.list[i]
    }

    /// Every endpoint, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Endpoint> {
        self.list.iter()
    }

    /// The endpoint for a request (`session`: its conversation, else its `index`), held
    /// in flight until the lease is dropped.
    pub fn pick(&self, index: u64, session: Option<u64>) -> Lease<'_> {
        let i = if self.list.len() == 1 { 0 } else { self.choose(index, session) };
        let endpoint = &self.list[i];
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        Lease { endpoint, index: i as u32 }
    }

    fn choose(&self, index: u64, session: Option<u64>) -> usize {
        match self.policy {
            Policy::RoundRobin => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                self.cycle[(n % self.cycle.len() as u64) as usize] as usize
            }
            Policy::Random => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                let total: u64 = self.list.iter().map(|e| u64::from(e.weight)).sum();
                let mut x = mix(self.seed ^ mix(n)) % total;
                for (i, e) in self.list.iter().enumerate() {
                    if x < u64::from(e.weight) {
                        return i;
                    }
                    x -= u64::from(e.weight);
                }
                self.list.len() - 1
            }
            Policy::LeastInFlight => {
                let start = (self.next.fetch_add(1, Ordering::Relaxed) % self.list.len() as u64) as usize;
                let load = |i: usize| {
                    let e = &self.list[i];
                    f64::from(e.in_flight.load(Ordering::Relaxed)) / f64::from(e.weight)
                };
                (0..self.list.len())
                    .map(|k| (start + k) % self.list.len())
                    .fold(start, |best, i| if load(i) < load(best) { i } else { best })
            }
            Policy::Session => {
                let key = mix(session.unwrap_or(index) ^ 0x5E55_1011);
                let score = |i: usize| {
                    let u = unit(mix(key ^ mix(i as u64 + 1)));
                    // Weighted rendezvous: the largest -w / ln(u).
                    -f64::from(self.list[i].weight) / u.ln().min(-f64::MIN_POSITIVE)
                };
                (1..self.list.len()).fold(0, |best, i| if score(i) > score(best) { i } else { best })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smooth_cycle_spreads_each_weight_through_the_cycle() {
        assert_eq!(smooth_cycle(&[1, 1, 1]), vec![0, 1, 2]);
        assert_eq!(smooth_cycle(&[5, 1, 1]), vec![0, 0, 1, 0, 2, 0, 0]);
        assert_eq!(smooth_cycle(&[4, 2]), vec![0, 1, 0], "reduced by the common divisor");
        let big = smooth_cycle(&[100_000, 1]);
        assert!(big.len() as u64 <= CYCLE_MAX + 1 && big.contains(&1), "scaled down, the small one kept");
    }

    fn endpoints(weights: &[u32], policy: Policy) -> Endpoints {
        use crate::engine::connector::Connector;
        use crate::engine::target::Target;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let target = rt.block_on(Target::resolve("http://127.0.0.1:9")).expect("a target");
        let list = weights
            .iter()
            .map(|&w| {
                let connector =
                    Connector::with_tls(target.clone(), crate::engine::conn::Version::Http1, &Default::default())
                        .expect("a connector");
                let pool = Arc::new(Pool::with_connections(connector, Arc::default(), 1, 0));
                let tpl = Arc::new(crate::engine::load::request::tests_template());
                (pool, tpl, w)
            })
            .collect();
        Endpoints::new(list, policy, 7)
    }

    fn counts(e: &Endpoints, n: u64, session: impl Fn(u64) -> Option<u64>) -> Vec<u64> {
        let mut c = vec![0; e.len()];
        for k in 0..n {
            c[e.pick(k, session(k)).index as usize] += 1;
        }
        c
    }

    #[test]
    fn each_policy_spreads_by_weight() {
        assert_eq!(counts(&endpoints(&[1, 1, 1], Policy::RoundRobin), 300, |_| None), vec![100; 3]);
        assert_eq!(counts(&endpoints(&[2, 1], Policy::RoundRobin), 300, |_| None), vec![200, 100]);
        let random = counts(&endpoints(&[2, 1, 1], Policy::Random), 40_000, |_| None);
        assert!(random.iter().zip([20_000, 10_000, 10_000]).all(|(&got, want)| got.abs_diff(want) < 600), "{random:?}");
        let by_session = counts(&endpoints(&[1, 1, 1, 1], Policy::Session), 40_000, Some);
        assert!(by_session.iter().all(|&c| c.abs_diff(10_000) < 600), "{by_session:?}");
        // Nothing stays in flight: least-in-flight takes each endpoint in turn.
        assert_eq!(counts(&endpoints(&[1, 1, 1], Policy::LeastInFlight), 30, |_| None), vec![10; 3]);
    }

    #[test]
    fn a_session_keeps_its_endpoint_and_least_in_flight_avoids_the_busy_one() {
        let e = endpoints(&[1, 1, 1], Policy::Session);
        for s in 0..50 {
            let first = e.pick(s * 1000, Some(s)).index;
            assert!((1..10).all(|t| e.pick(s * 1000 + t, Some(s)).index == first), "session {s}");
        }
        let e = endpoints(&[1, 1, 1], Policy::LeastInFlight);
        let held: Vec<Lease<'_>> = (0..4).map(|k| e.pick(k, None)).collect();
        // 4 in flight over 3: one endpoint has 2; the next two picks go to the others.
        let busy = (0..3).find(|&i| held.iter().filter(|l| l.index == i).count() == 2).expect("one has two");
        let next: Vec<u32> = (0..2).map(|k| e.pick(10 + k, None).index).collect();
        assert!(!next.contains(&busy), "{next:?} avoid {busy}");
        drop(held);
    }
}
