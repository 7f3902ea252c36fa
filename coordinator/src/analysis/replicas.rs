//! The router's quality seen from the client (D69), folded from each row's `replica` (the
//! response header `--replica-header` names): the replicas seen and each one's share of
//! the requests; for conversations, whether each session's requests all landed on one
//! replica (session affinity), and the prefix cache's hit rate of the requests that
//! stayed on their session's previous replica against those that moved. A session is
//! kept only while it is open (its last row carries `session_end`).

use super::fold::{Fold, Whole};
use crate::fleet::outcome::GlobalRow;
use std::collections::HashMap;

/// Distinct replica names tracked; any further one counts as [`OTHER`].
pub const MAX_REPLICAS: usize = 256;
/// The name of replicas past [`MAX_REPLICAS`].
pub const OTHER: &str = "(other)";

/// One replica's requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replica {
    pub name: String,
    pub requests: u64,
    pub completed: u64,
}

/// Prefix-cache counts of requests after a session's first.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Follow {
    pub requests: u64,
    pub cached_tokens: u64,
    pub input_tokens: u64,
    /// Of those requests, how many reported cached tokens.
    pub reported: u64,
}

impl Follow {
    pub fn hit_rate(&self) -> Option<f64> {
        (self.reported > 0 && self.input_tokens > 0).then(|| self.cached_tokens as f64 / self.input_tokens as f64)
    }
}

/// What the fold makes of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicasView {
    /// By first appearance.
    pub replicas: Vec<Replica>,
    /// Responses without the header.
    pub unnamed: u64,
    /// Sessions ended with at least two requests, and those whose requests all went to
    /// one replica.
    pub sessions: u64,
    pub affine_sessions: u64,
    pub stayed: Follow,
    pub moved: Follow,
}

/// The fold: replica names interned; open sessions' last replica and whether they moved.
#[derive(Debug, Default)]
pub struct ReplicasFold {
    view: ReplicasView,
    index: HashMap<String, u16>,
    /// Open session -> (its last replica, whether it ever moved, requests so far).
    open: HashMap<u64, (u16, bool, u32)>,
}

impl ReplicasFold {
    fn intern(&mut self, name: &str) -> u16 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let name = if self.view.replicas.len() >= MAX_REPLICAS { OTHER } else { name };
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.view.replicas.len() as u16;
        self.view.replicas.push(Replica { name: name.to_string(), ..Default::default() });
        self.index.insert(name.to_string(), i);
        i
    }
}

impl Fold for ReplicasFold {
    type Out = Option<ReplicasView>;

    fn row(&mut self, r: &GlobalRow) {
        let row = &r.row;
        // Only answered requests name a replica (a refused connection has no head).
        if row.probe || row.http_status == 0 {
            if let (Some(s), Some(_)) = (row.session, &row.session_end) {
                self.end(s);
            }
            return;
        }
        if row.replica.is_empty() {
            self.view.unnamed += 1;
        } else {
            let i = self.intern(&row.replica);
            let rep = &mut self.view.replicas[i as usize];
            rep.requests += 1;
            rep.completed += u64::from(r.ok());
            if let Some(s) = row.session {
                let entry = self.open.entry(s).or_insert((i, false, 0));
                if entry.2 > 0 {
                    let moved = entry.0 != i;
                    entry.1 |= moved;
                    let f = if moved { &mut self.view.moved } else { &mut self.view.stayed };
                    f.requests += 1;
                    if let Some(c) = row.cached_tokens.filter(|_| r.ok()) {
                        f.cached_tokens += u64::from(c);
                        f.input_tokens += u64::from(row.input_tokens);
                        f.reported += 1;
                    }
                }
                entry.0 = i;
                entry.2 += 1;
            }
        }
        if let (Some(s), Some(_)) = (row.session, &row.session_end) {
            self.end(s);
        }
    }

    fn finish(self, _run: &Whole) -> Self::Out {
        Some(self.view)
    }
}

impl ReplicasFold {
    /// A session ended: counted in the affinity when it made two requests or more.
    fn end(&mut self, session: u64) {
        if let Some((_, moved, n)) = self.open.remove(&session)
            && n >= 2
        {
            self.view.sessions += 1;
            self.view.affine_sessions += u64::from(!moved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Row, SessionEnd};

    fn turn(session: u64, turn: u32, replica: &str, cached: u32, last: bool) -> GlobalRow {
        let row = Row {
            session: Some(session),
            turn,
            replica: replica.into(),
            http_status: 200,
            input_tokens: 100,
            cached_tokens: Some(cached),
            session_end: last.then(SessionEnd::default),
            ..Default::default()
        };
        GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row }
    }

    #[test]
    fn a_session_that_stays_is_affine_and_one_that_moves_is_not() {
        let mut f = ReplicasFold::default();
        // Session 1 stays on a (its turns hit the cache); session 2 moves a -> b -> a.
        for (t, last) in [(0, false), (1, false), (2, true)] {
            f.row(&turn(1, t, "a", if t == 0 { 0 } else { 80 }, last));
        }
        f.row(&turn(2, 0, "a", 0, false));
        f.row(&turn(2, 1, "b", 0, false));
        f.row(&turn(2, 2, "a", 40, true));
        // A one-request session: not counted in the affinity.
        f.row(&turn(3, 0, "b", 0, true));
        let mut unnamed = turn(4, 0, "", 0, true);
        unnamed.row.session = None;
        f.row(&unnamed);
        let v = f.finish(&Whole::default()).expect("a view");
        let shares: Vec<(&str, u64)> = v.replicas.iter().map(|r| (r.name.as_str(), r.requests)).collect();
        assert_eq!(shares, [("a", 5), ("b", 2)]);
        assert_eq!((v.sessions, v.affine_sessions, v.unnamed), (2, 1, 1));
        assert_eq!((v.stayed.requests, v.moved.requests), (2, 2));
        assert_eq!(v.stayed.hit_rate(), Some(0.8));
        assert_eq!(v.moved.hit_rate(), Some(0.2));
        assert_eq!(f_open_after(), 0);
    }

    fn f_open_after() -> usize {
        let mut f = ReplicasFold::default();
        f.row(&turn(9, 0, "a", 0, false));
        f.row(&turn(9, 1, "a", 0, true));
        f.open.len()
    }

    #[test]
    fn names_past_the_limit_are_one_other() {
        let mut f = ReplicasFold::default();
        for k in 0..MAX_REPLICAS + 10 {
            let mut r = turn(0, 0, &format!("r{k}"), 0, false);
            r.row.session = None;
            f.row(&r);
        }
        let v = f.finish(&Whole::default()).expect("a view");
        assert_eq!(v.replicas.len(), MAX_REPLICAS + 1);
        assert_eq!(v.replicas.last().map(|r| (r.name.as_str(), r.requests)), Some((OTHER, 10)));
    }
}
