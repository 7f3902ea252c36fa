//! The set of outputs of one command ([`Outputs`]), opened in one place: the terminal and
//! the result files when the command starts ([`Outputs::standard`]); the live ones its
//! plan asks for when it opens its session ([`Outputs::open`]: `--prometheus-listen`,
//! `--otlp-endpoint`); a run's own (`--save-rows`) for that run only
//! ([`Outputs::of_run`]). A command that sends no load opens only the first. Nothing is
//! process-wide: two commands in one process have two sets.

use super::live::Live;
use super::result::{RunResult, SweepSummary, ValidationResult};
use super::rows::RowFile;
use super::traces::Traces;
use super::{LevelStart, Output, OutputError, RunRecord, StartError, capacity, files, terminal};
use crate::fleet::outcome::GlobalRow;
use crate::plan::RunPlan;
use std::path::Path;

/// Outputs in order. A run's output that fails to write is closed and its error kept
/// ([`Outputs::take_failure`]); the others go on.
#[derive(Default)]
pub struct Outputs {
    list: Vec<Box<dyn Output>>,
    failed: Option<(&'static str, OutputError)>,
    /// Closed: a second [`Outputs::stop`] does nothing.
    stopped: bool,
}

impl Outputs {
    /// The terminal (`command` prefixes its notices; `summaries`: each run's summary
    /// block is printed) and the result files.
    pub fn standard(command: &'static str, summaries: bool) -> Self {
        Self {
            list: vec![Box::new(terminal::Terminal::new(command, summaries)), Box::new(files::Files)],
            failed: None,
            stopped: false,
        }
    }

    /// Opens the live outputs `plan` asks for, beside those already open.
    pub async fn open(&mut self, plan: &RunPlan) -> Result<(), StartError> {
        if let Some(addr) = plan.prometheus_listen {
            self.list.push(Box::new(Live::start(addr, plan.live_linger).await?));
        }
        if let Some(o) = &plan.otlp {
            let o = o.clone();
            // The HTTP exporter's client runs a runtime of its own: built off the async threads.
            let traces = tokio::task::spawn_blocking(move || Traces::new(&o))
                .await
                .map_err(|e| StartError { flag: "--otlp-endpoint", message: e.to_string(), usage: false })?
                .map_err(|message| StartError { flag: "--otlp-endpoint", message, usage: true })?;
            self.list.push(Box::new(traces));
        }
        Ok(())
    }

    /// The outputs of one run of `plan`: its rows file (`--save-rows`).
    pub fn of_run(plan: &RunPlan) -> Result<Self, (&'static str, OutputError)> {
        let mut list: Vec<Box<dyn Output>> = Vec::new();
        if let Some(p) = plan.save_rows.as_deref() {
            let names: Vec<String> = plan.endpoints.list.iter().map(|e| e.name.clone()).collect();
            let f = RowFile::create(p).map_err(|e| ("--save-rows", e))?;
            list.push(Box::new(if names.len() > 1 { f.with_endpoints(names) } else { f }));
        }
        Ok(Self { list, ..Self::default() })
    }

    /// Each output in turn; one that fails is closed and its error kept (the first).
    fn each(&mut self, mut f: impl FnMut(&mut dyn Output) -> Result<(), OutputError>) {
        let mut i = 0;
        while i < self.list.len() {
            match f(self.list[i].as_mut()) {
                Ok(()) => i += 1,
                Err(e) => {
                    let o = self.list.remove(i);
                    self.failed.get_or_insert((o.name(), e));
                }
            }
        }
    }

    /// The first output that failed while a run went, with its flag.
    pub fn take_failure(&mut self) -> Option<(&'static str, OutputError)> {
        self.failed.take()
    }

    pub fn level_start(&mut self, s: &LevelStart<'_>) {
        self.list.iter_mut().for_each(|o| o.level_start(s));
    }
    pub fn rows(&mut self, agents: &[String], rows: &[&GlobalRow]) {
        self.each(|o| o.rows(agents, rows));
    }
    pub fn health(&mut self, agent: &str, h: &surge_proto::Health) {
        self.list.iter_mut().for_each(|o| o.health(agent, h));
    }
    pub fn progress(&mut self, finished: u64) {
        self.list.iter_mut().for_each(|o| o.progress(finished));
    }
    pub fn status(&mut self, line: &str) {
        self.list.iter_mut().for_each(|o| o.status(line));
    }
    pub fn level_end(&mut self, result: &RunResult) {
        self.each(|o| o.level_end(result));
    }
    pub fn notice(&mut self, message: &str) {
        self.list.iter_mut().for_each(|o| o.notice(message));
    }

    /// The finished results: the first output that cannot write ends the dispatch.
    pub fn run(&mut self, r: &RunRecord) -> Result<(), OutputError> {
        self.list.iter_mut().try_for_each(|o| o.run(r))
    }
    pub fn sweep(&mut self, s: &SweepSummary, dir: &Path, done: bool) -> Result<(), OutputError> {
        self.list.iter_mut().try_for_each(|o| o.sweep(s, dir, done))
    }
    pub fn validation(&mut self, v: &ValidationResult, dir: &Path) -> Result<(), OutputError> {
        self.list.iter_mut().try_for_each(|o| o.validation(v, dir))
    }
    pub fn capacity(&mut self, c: &capacity::CapacityResult, dir: &Path, done: bool) -> Result<(), OutputError> {
        self.list.iter_mut().try_for_each(|o| o.capacity(c, dir, done))
    }

    /// Closes every output, the live endpoint after its linger (Ctrl-C cuts it short),
    /// off the async threads. The terminal still takes notices afterwards.
    pub async fn stop(&mut self, last: Option<&RunResult>) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let linger = self.list.iter().map(|o| o.linger()).max().unwrap_or_default();
        if !linger.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        let last = last.cloned();
        let mut list = std::mem::take(&mut self.list);
        self.list = tokio::task::spawn_blocking(move || {
            for o in &mut list {
                o.stop(last.as_ref());
            }
            list
        })
        .await
        .unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn free_addr() -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    async fn get_metrics(addr: std::net::SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut out = String::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_string(&mut out)).await;
        out
    }

    async fn closed(addr: std::net::SocketAddr) -> bool {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    }

    fn plan() -> RunPlan {
        crate::cli::build::run_plan(crate::cli::build::default_run_args().unwrap()).unwrap()
    }

    /// Two commands in one process each own their outputs: the second configuration is
    /// served, not ignored (it was, with a process-wide listener); stop closes each.
    #[tokio::test]
    async fn two_commands_in_one_process_each_serve_their_own_live_metrics() {
        let mut plan = plan();
        let (a, b) = (free_addr(), free_addr());
        plan.live_linger = std::time::Duration::ZERO;
        plan.prometheus_listen = Some(a);
        let mut first = Outputs::default();
        first.open(&plan).await.unwrap();
        plan.prometheus_listen = Some(b);
        let mut second = Outputs::default();
        second.open(&plan).await.unwrap();
        let row = GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Default::default() };
        second.rows(&["agent-b".to_string()], &[&row]);
        assert!(get_metrics(a).await.starts_with("HTTP/1.1 200"));
        let page = get_metrics(b).await;
        assert!(page.starts_with("HTTP/1.1 200") && page.contains("agent-b"), "{page}");
        assert!(!get_metrics(a).await.contains("agent-b"), "each command counts its own rows");
        first.stop(None).await;
        second.stop(None).await;
        assert!(closed(b).await, "stop closes the endpoint");
    }

    /// After the run, the endpoint serves the final values for the linger, then closes.
    #[tokio::test]
    async fn the_final_values_stay_served_for_the_linger() {
        let mut plan = plan();
        let addr = free_addr();
        plan.prometheus_listen = Some(addr);
        plan.live_linger = std::time::Duration::from_millis(1500);
        let mut out = Outputs::default();
        out.open(&plan).await.unwrap();
        let row = GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Default::default() };
        out.rows(&["agent-x".to_string()], &[&row, &row, &row]);
        let t = std::time::Instant::now();
        let stopping = tokio::spawn(async move { out.stop(None).await });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let page = get_metrics(addr).await;
        assert!(page.contains("agent-x"), "still served after the run: {page}");
        stopping.await.unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_millis(1500), "{:?}", t.elapsed());
        assert!(closed(addr).await, "closed after the linger");
    }

    /// A rows file that cannot be written is closed at its first failure and named; the
    /// other outputs still hear the run.
    #[test]
    fn a_failing_output_is_dropped_and_named_and_the_others_go_on() {
        struct Failing;
        impl Output for Failing {
            fn name(&self) -> &'static str {
                "--save-rows"
            }
            fn rows(&mut self, _: &[String], _: &[&GlobalRow]) -> Result<(), OutputError> {
                Err(OutputError::Write { path: "x".into(), source: std::io::Error::other("disk full") })
            }
        }
        struct Counting(std::sync::Arc<std::sync::atomic::AtomicU64>);
        impl Output for Counting {
            fn name(&self) -> &'static str {
                "count"
            }
            fn rows(&mut self, _: &[String], rows: &[&GlobalRow]) -> Result<(), OutputError> {
                self.0.fetch_add(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
        }
        let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut out = Outputs { list: vec![Box::new(Failing), Box::new(Counting(n.clone()))], ..Outputs::default() };
        let row = GlobalRow { agent: 0, start_s: 0.0, intended_s: None, row: Default::default() };
        out.rows(&[], &[&row]);
        out.rows(&[], &[&row, &row]);
        assert_eq!(n.load(std::sync::atomic::Ordering::Relaxed), 3);
        let (flag, e) = out.take_failure().expect("the failure is kept");
        assert_eq!(flag, "--save-rows");
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(out.list.len(), 1, "the failing output is closed");
    }
}
