//! When each agent was last heard (D79): its link writes the time on every message it
//! reads, and the collection loop reads it at its next poll (every 50 ms at most). A
//! heartbeat thus renews the agent's liveness without waking the loop's thread, which
//! hears only the messages it acts on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use surge_proto::agent_msg;

/// The last time each agent of a fleet was heard.
#[derive(Debug)]
pub struct Heard {
    base: Instant,
    /// Nanoseconds after `base`, plus one; 0 is never.
    at_ns: Vec<AtomicU64>,
}

impl Heard {
    pub fn new(agents: usize) -> Self {
        Self { base: Instant::now(), at_ns: (0..agents).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Agent `agent` was heard at `at` (an earlier time than the last is ignored).
    pub fn mark(&self, agent: usize, at: Instant) {
        let ns = at.saturating_duration_since(self.base).as_nanos() as u64 + 1;
        if let Some(a) = self.at_ns.get(agent) {
            a.fetch_max(ns, Ordering::Relaxed);
        }
    }

    /// A message of agent `agent` read at `at` by its link: the time is written here;
    /// a heartbeat (or an empty message) ends here, anything else goes on to the events.
    pub fn arrived(&self, agent: usize, at: Instant, msg: Option<agent_msg::Msg>) -> Option<agent_msg::Msg> {
        self.mark(agent, at);
        msg.filter(|m| !matches!(m, agent_msg::Msg::Heartbeat(_)))
    }

    /// When agent `agent` was last heard, if ever.
    pub fn last(&self, agent: usize) -> Option<Instant> {
        let ns = self.at_ns.get(agent)?.load(Ordering::Relaxed);
        (ns > 0).then(|| self.base + Duration::from_nanos(ns - 1))
    }

    /// Every agent heard so far, with when it was last heard.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Instant)> + '_ {
        (0..self.at_ns.len()).filter_map(|agent| Some((agent, self.last(agent)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_time_is_kept_per_agent() {
        let h = Heard::new(2);
        let t = Instant::now() + Duration::from_millis(5);
        assert_eq!(h.last(0), None);
        h.mark(0, t);
        h.mark(0, t - Duration::from_millis(3));
        assert_eq!(h.last(0), Some(t));
        assert_eq!(h.last(1), None);
        h.mark(7, t);
        assert_eq!(h.iter().collect::<Vec<_>>(), [(0, t)]);
    }

    #[test]
    fn a_heartbeat_is_a_time_and_nothing_more() {
        let h = Heard::new(2);
        let t = Instant::now() + Duration::from_millis(5);
        let beat = agent_msg::Msg::Heartbeat(surge_proto::Heartbeat::default());
        assert!(h.arrived(1, t, Some(beat)).is_none(), "no event for a heartbeat");
        assert_eq!(h.last(1), Some(t), "but its time is kept");
        let later = t + Duration::from_millis(100);
        let health = agent_msg::Msg::Health(surge_proto::Health::default());
        assert!(matches!(h.arrived(1, later, Some(health)), Some(agent_msg::Msg::Health(_))));
        assert_eq!(h.last(1), Some(later));
        assert!(h.arrived(0, later, None).is_none());
        assert_eq!(h.last(0), Some(later), "an empty message is heard too");
    }
}
