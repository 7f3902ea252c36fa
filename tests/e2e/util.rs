//! Shared harness: locate the built binaries, start processes on loopback addresses and
//! read the address they print, run `surge` with a time bound, scrape the echo server's
//! metrics, and clean up (every process started here is killed by its PID on drop).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/<name>`, next to the test binary's `deps/` directory.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(p.exists(), "{} is not built: run `cargo build --bins` (cargo test --workspace builds it)", p.display());
    p
}

/// A child process, killed and reaped on drop.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL now.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a signal by PID (e.g. "TERM").
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status();
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for exit at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Starts `program args`, waits (at most 20 s) for a stdout line containing `marker`
/// and returns the process and the text after the marker.
pub fn spawn_until(program: &Path, args: &[&str], marker: &str, name: &'static str) -> (Proc, String) {
    let mut child = Command::new(program)
        .args(args)
        .env("SURGE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = marker.to_string();
    std::thread::spawn(move || {
        let marker = wanted;
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(i) = line.find(&marker) {
                let _ = tx.send(line[i + marker.len()..].trim().to_string());
                sent = true;
            }
        }
    });
    let proc = Proc { child };
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(v) => (proc, v),
        Err(_) => panic!("{name} did not print {marker:?} within 20 s"),
    }
}

/// `surge echo --listen IP:0 ARGS`; returns the process and its base URL.
pub fn echo(ip: &str, args: &[&str]) -> (Proc, String) {
    let listen = format!("{ip}:0");
    let mut all = vec!["echo", "--listen", &listen];
    all.extend_from_slice(args);
    spawn_until(&bin("surge"), &all, "listening on ", "surge echo")
}

/// `surge-agent --listen IP:0 ARGS`; returns the process and its HOST:PORT.
pub fn agent(ip: &str, args: &[&str]) -> (Proc, String) {
    let listen = format!("{ip}:0");
    let mut all = vec!["--listen", &listen];
    all.extend_from_slice(args);
    spawn_until(&bin("surge-agent"), &all, "listening on ", "surge-agent")
}

/// Runs `surge ARGS` to completion (at most `limit`, then it is killed), capturing its output.
pub fn surge(args: &[&str], limit: Duration) -> Output {
    surge_bg(args).finish(limit)
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A value of the echo server's Prometheus metrics.
pub fn echo_metric(base_url: &str, name: &str) -> f64 {
    let addr = base_url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect echo");
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("write");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse::<f64>().ok()))
        .unwrap_or_else(|| panic!("metric {name} not in {body}"))
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory of its own: tests run in parallel in one process, and two may
    /// share a tag.
    pub fn new(tag: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("surge-e2e-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("mkdir");
        Self(p)
    }
    pub fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn read_json(path: &str) -> serde_json::Value {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// numpy's linear-interpolation percentile, written independently of surge's.
pub fn np_percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

/// A `surge` process running in the background, its output collected by threads.
pub struct Background {
    pub proc: Proc,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

pub fn surge_bg(args: &[&str]) -> Background {
    bin_bg("surge", args)
}

/// Starts the workspace's binary `name` with `args`, its output captured.
pub fn bin_bg(name: &str, args: &[&str]) -> Background {
    let mut child = Command::new(bin(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    let mut o = child.stdout.take().expect("piped");
    let mut e = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = o.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = e.read_to_end(&mut v);
        v
    });
    Background { proc: Proc { child }, out: Some(out), err: Some(err) }
}

impl Background {
    /// Waits for exit (at most `limit`) and returns status, stdout, stderr.
    pub fn finish(mut self, limit: Duration) -> Output {
        let status = self.proc.wait_exit(limit).unwrap_or_else(|| panic!("it did not exit within {limit:?}"));
        let stdout = self.out.take().and_then(|t| t.join().ok()).unwrap_or_default();
        let stderr = self.err.take().and_then(|t| t.join().ok()).unwrap_or_default();
        Output { status, stdout, stderr }
    }
}

/// Polls `f` every 20 ms until it holds, at most `limit`.
pub fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < until, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `surge ARGS --save-result` into `dir/r.json`: asserts the run succeeded and returns the
/// result document.
pub fn run_saved(dir: &TempDir, args: &[&str], limit: Duration) -> serde_json::Value {
    let d = dir.path("");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--save-result", "--result-dir", &d, "--result-filename", "r.json"]);
    let out = surge(&all, limit);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    read_json(&dir.path("r.json"))
}
