//! Sub-agent graphs (D68), folded from the rows: a root session that spawned sub-agents
//! ends with a row carrying its graph's totals (from its first start to the last end of
//! it and every session under it; the critical path, the most request time along one
//! chain of dependent turns; the most sessions one turn spawned). Sub-agents' rows carry
//! their `parent`. Nothing is kept per graph.

use super::fold::{Fold, Whole};
use super::sample::Sample;
use crate::fleet::outcome::GlobalRow;

/// What a run's sub-agent graphs came to.
#[derive(Debug, Clone)]
pub struct Graphs {
    /// Root sessions that spawned sub-agents and ended.
    pub graphs: u64,
    pub duration: Sample,
    pub critical_path: Sample,
    pub max_fan_out: u32,
    /// Sub-agents' requests, and their sessions that ended.
    pub sub_agent_requests: u64,
    pub sub_agent_sessions: u64,
}

impl Default for Graphs {
    fn default() -> Self {
        Self {
            graphs: 0,
            duration: Sample::light(),
            critical_path: Sample::light(),
            max_fan_out: 0,
            sub_agent_requests: 0,
            sub_agent_sessions: 0,
        }
    }
}

impl Fold for Graphs {
    type Out = Option<Graphs>;

    fn row(&mut self, r: &GlobalRow) {
        let end = r.row.session_end.as_ref();
        if r.row.parent.is_some() {
            self.sub_agent_requests += 1;
            self.sub_agent_sessions += u64::from(end.is_some());
        }
        if let Some(e) = end.filter(|e| e.fan_out > 0) {
            self.graphs += 1;
            self.duration.add(e.graph_duration_us as f64 / 1e6);
            self.critical_path.add(e.critical_path_us as f64 / 1e6);
            self.max_fan_out = self.max_fan_out.max(e.fan_out);
        }
    }

    fn drop_exact(&mut self) {
        self.duration.drop_exact();
        self.critical_path.drop_exact();
    }

    fn finish(mut self, _run: &Whole) -> Self::Out {
        if self.graphs == 0 && self.sub_agent_requests == 0 {
            return None;
        }
        self.duration.seal();
        self.critical_path.seal();
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Row, SessionEnd};

    #[test]
    fn a_graph_is_read_from_its_roots_last_row() {
        let mut f = Graphs::default();
        let child = |end| GlobalRow {
            agent: 0,
            start_s: 0.0,
            intended_s: None,
            row: Row { session: Some(9), parent: Some(1), session_end: end, ..Default::default() },
        };
        f.row(&child(None));
        f.row(&child(Some(SessionEnd::default())));
        let end =
            SessionEnd { graph_duration_us: 500_000, critical_path_us: 300_000, fan_out: 3, ..Default::default() };
        f.row(&GlobalRow {
            agent: 0,
            start_s: 0.0,
            intended_s: None,
            row: Row { session: Some(1), session_end: Some(end), ..Default::default() },
        });
        let g = f.finish(&Whole::default()).expect("a graph");
        assert_eq!((g.graphs, g.max_fan_out, g.sub_agent_requests, g.sub_agent_sessions), (1, 3, 2, 1));
        assert!((g.duration.median_ms() - 500.0).abs() < 1e-9 && (g.critical_path.median_ms() - 300.0).abs() < 1e-9);
        assert!(Graphs::default().finish(&Whole::default()).is_none(), "nothing for a run without sub-agents");
    }
}
