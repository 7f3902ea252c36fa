//! What this agent can carry, checked before a run is prepared: its host's open-file
//! limit (the soft limit raised to the hard one at start), its usable source ports, and
//! `--max-in-flight` shared by every session the agent serves. A refusal names the
//! limit and how to raise it.

use std::sync::Arc;
use std::sync::Mutex;

/// Descriptors kept for what is not a target connection (listener, gRPC, files, runtime).
const RESERVED_FDS: u64 = 100;
/// HTTP/2 streams per connection the engine opens (one connection per this many).
const H2_STREAMS: u32 = 100;

/// The host's limits on connections to one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// Open files allowed (soft limit, after raising it to the hard one).
    pub open_files: u64,
    /// Source ports the kernel hands out (`net.ipv4.ip_local_port_range`).
    pub source_ports: u32,
}

impl HostLimits {
    /// Raises the open-file soft limit to the hard limit, then reads both limits.
    pub fn raise_and_read() -> Self {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let open_files = match getrlimit(Resource::RLIMIT_NOFILE) {
            Ok((soft, hard)) if soft < hard => {
                if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                    hard
                } else {
                    soft
                }
            }
            Ok((soft, _)) => soft,
            Err(_) => u64::MAX,
        };
        Self { open_files, source_ports: source_ports().unwrap_or(u32::MAX) }
    }

    /// No limit (tests).
    pub fn unlimited() -> Self {
        Self { open_files: u64::MAX, source_ports: u32::MAX }
    }

    /// Connections `concurrency` requests in flight need at most.
    fn connections(concurrency: u32, h2: bool) -> u32 {
        if h2 { concurrency.div_ceil(H2_STREAMS) } else { concurrency }
    }

    /// The most requests in flight these limits carry.
    pub fn max_concurrency(&self, h2: bool) -> u32 {
        let by_files = self.open_files.saturating_sub(RESERVED_FDS).min(u64::from(u32::MAX)) as u32;
        let conns = by_files.min(self.source_ports);
        if h2 { conns.saturating_mul(H2_STREAMS) } else { conns }
    }

    /// Refuses `concurrency` in flight when it needs more connections than the limits allow.
    pub fn check(&self, concurrency: u32, h2: bool) -> Result<(), String> {
        let conns = u64::from(Self::connections(concurrency, h2));
        if conns + RESERVED_FDS > self.open_files {
            return Err(format!(
                "{concurrency} requests in flight need {conns} connections, above this agent's open-file limit {} \
                 ({RESERVED_FDS} kept for the agent itself): raise it (ulimit -n, or LimitNOFILE= in the systemd \
                 unit), lower --max-concurrency, or add agents",
                self.open_files
            ));
        }
        if conns > u64::from(self.source_ports) {
            return Err(format!(
                "{concurrency} requests in flight need {conns} connections to one target, above the {} source ports \
                 of net.ipv4.ip_local_port_range: widen the range, use HTTP/2, or add agents",
                self.source_ports
            ));
        }
        Ok(())
    }
}

/// Size of the kernel's ephemeral port range.
fn source_ports() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(str::parse::<u32>);
    let (lo, hi) = (it.next()?.ok()?, it.next()?.ok()?);
    (hi >= lo).then(|| hi - lo + 1)
}

/// `--max-in-flight`, shared by every session of the agent.
#[derive(Debug)]
pub struct Capacity {
    max: u32,
    reserved: Mutex<u32>,
}

/// Requests in flight held for one run; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    capacity: Arc<Capacity>,
    amount: u32,
}

impl Capacity {
    pub fn new(max: u32) -> Arc<Self> {
        Arc::new(Self { max, reserved: Mutex::new(0) })
    }

    /// Holds `want` in flight (`None`: all that is free, at most `ceiling`), or says why not.
    pub fn reserve(self: &Arc<Self>, want: Option<u32>, ceiling: u32) -> Result<Reservation, String> {
        let mut reserved = self.reserved.lock().expect("capacity lock");
        let free = self.max - *reserved;
        let amount = match want {
            Some(n) if n <= free => n,
            Some(n) => {
                return Err(format!(
                    "{n} requests in flight asked, but this agent's max-in-flight {} is shared by its sessions and \
                     {} are held by runs of other coordinators",
                    self.max, *reserved
                ));
            }
            None if free > 0 => free.min(ceiling),
            None => {
                return Err(format!("this agent's max-in-flight {} is held by runs of other coordinators", self.max));
            }
        };
        *reserved += amount;
        Ok(Reservation { capacity: Arc::clone(self), amount })
    }
}

impl Reservation {
    pub fn amount(&self) -> u32 {
        self.amount
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.capacity.reserved.lock().expect("capacity lock");
        *reserved -= self.amount;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_what_they_cannot_carry_naming_the_limit() {
        let l = HostLimits { open_files: 1024, source_ports: 28232 };
        assert!(l.check(900, false).is_ok());
        let e = l.check(2000, false).unwrap_err();
        assert!(e.contains("open-file limit 1024") && e.contains("ulimit -n"), "{e}");
        assert!(l.check(2000, true).is_ok(), "HTTP/2 needs 20 connections");
        assert_eq!(l.max_concurrency(false), 924);
        let ports = HostLimits { open_files: 1 << 20, source_ports: 1000 };
        let e = ports.check(2000, false).unwrap_err();
        assert!(e.contains("1000 source ports") && e.contains("ip_local_port_range"), "{e}");
        assert!(HostLimits::unlimited().check(u32::MAX, false).is_ok());
    }

    #[test]
    fn max_in_flight_is_shared_by_sessions() {
        let c = Capacity::new(100);
        let a = c.reserve(Some(60), u32::MAX).unwrap();
        let e = c.reserve(Some(50), u32::MAX).unwrap_err();
        assert!(e.contains("max-in-flight 100") && e.contains("60 are held"), "{e}");
        let b = c.reserve(None, u32::MAX).unwrap();
        assert_eq!(b.amount(), 40, "unbounded takes what is free");
        assert!(c.reserve(None, u32::MAX).is_err());
        drop(a);
        assert_eq!(c.reserve(None, 10).unwrap().amount(), 10, "freed, and capped by the ceiling");
        drop(b);
        assert_eq!(c.reserve(Some(100), u32::MAX).unwrap().amount(), 100);
    }
}
