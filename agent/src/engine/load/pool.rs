//! The connections of a run: each in-flight request gets an idle HTTP/1.1 connection of
//! its own or a share of a multiplexed one (HTTP/2, HTTP/3); a connection the server
//! closed while idle is dropped and a new one opened (a reconnect, not a failure).

use crate::engine::conn::{Conn, Version};
use crate::engine::connector::{ConnectError, Connector};
use crate::engine::h3;
use crate::engine::stats::Stats;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Streams multiplexed on one HTTP/2 or HTTP/3 connection before another is opened.
const STREAMS_PER_CONN: usize = h3::STREAMS_PER_CONN;

/// Idle HTTP/1.1 connections, or the shared multiplexed ones.
#[derive(Debug)]
pub struct Pool {
    pub connector: Connector,
    stats: Arc<Stats>,
    idle: Mutex<Vec<Conn>>,
    shared: Mutex<Vec<Conn>>,
    shared_target: usize,
    shared_next: AtomicUsize,
}

impl Pool {
    /// `concurrency`: expected requests in flight; `connections`: multiplexed connections
    /// to share them (0: one per 100 requests in flight).
    pub fn with_connections(connector: Connector, stats: Arc<Stats>, concurrency: usize, connections: usize) -> Self {
        let shared_target = if connections > 0 { connections } else { concurrency.div_ceil(STREAMS_PER_CONN).max(1) };
        Self {
            connector,
            stats,
            idle: Mutex::new(Vec::new()),
            shared: Mutex::new(Vec::new()),
            shared_target,
            shared_next: AtomicUsize::new(0),
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A connection for one request, and whether it was used before.
    pub async fn checkout(&self) -> Result<(Conn, bool), ConnectError> {
        if self.connector.multiplexed() {
            return self.checkout_shared().await;
        }
        loop {
            let conn = self.idle.lock().expect("pool lock").pop();
            match conn {
                Some(c) if !c.is_closed() => return Ok((c, true)),
                Some(_) => continue,
                None => break,
            }
        }
        Ok((self.connector.connect(&self.stats).await?, false))
    }

    async fn checkout_shared(&self) -> Result<(Conn, bool), ConnectError> {
        {
            let mut conns = self.shared.lock().expect("pool lock");
            conns.retain(|c| !c.is_closed());
            if conns.len() >= self.shared_target {
                let i = self.shared_next.fetch_add(1, Ordering::Relaxed) % conns.len();
                let c = &conns[i];
                if let Some(sender) = c.sender.share() {
                    let shared =
                        Conn { sender, clock: c.clock.clone(), opened: None, gone: c.gone.clone(), driver: None };
                    return Ok((shared, true));
                }
            }
        }
        let conn = self.connector.connect(&self.stats).await?;
        self.share(&conn);
        Ok((conn, false))
    }

    /// A new connection, not taken from the idle set (multiplexed: also shared from now on).
    pub async fn connect_new(&self) -> Result<Conn, ConnectError> {
        let conn = self.connector.connect(&self.stats).await?;
        self.share(&conn);
        Ok(conn)
    }

    /// Adds a multiplexed connection to the shared set (HTTP/1.1 ones are not shared).
    fn share(&self, conn: &Conn) {
        if let Some(sender) = conn.sender.share() {
            let c = Conn { sender, clock: conn.clock.clone(), opened: None, gone: conn.gone.clone(), driver: None };
            self.shared.lock().expect("pool lock").push(c);
        }
    }

    /// Returns a connection after a complete response.
    pub fn checkin(&self, conn: Conn) {
        if conn.is_multiplexed() || conn.is_closed() {
            return;
        }
        self.idle.lock().expect("pool lock").push(conn);
    }

    /// Opens `n` connections ahead of the run (multiplexed: the shared set), at most
    /// `parallel` connects at a time. Without a forced version on https, one connection
    /// first shows what ALPN agrees on.
    pub async fn warm(self: &Arc<Self>, n: usize, parallel: usize) -> Result<usize, ConnectError> {
        let mut opened = 0;
        if self.connector.version == Version::Auto && self.connector.target.https && n > 0 {
            let mut conn = self.connector.connect(&self.stats).await?;
            conn.opened = None;
            self.keep(conn);
            opened = 1;
        }
        let n = if self.connector.multiplexed() { self.shared_target } else { n };
        let mut set = tokio::task::JoinSet::new();
        let mut launched = opened;
        while opened < n {
            while launched < n && set.len() < parallel.max(1) {
                let pool = Arc::clone(self);
                set.spawn(async move { pool.connector.connect(&pool.stats).await });
                launched += 1;
            }
            let Some(joined) = set.join_next().await else { break };
            let mut conn = joined.map_err(ConnectError::Task)??;
            // Opened ahead of the run: its first request reuses it (no connecting time).
            conn.opened = None;
            self.keep(conn);
            opened += 1;
        }
        Ok(opened)
    }

    fn keep(&self, conn: Conn) {
        if conn.is_multiplexed() {
            self.share(&conn);
        } else {
            self.idle.lock().expect("pool lock").push(conn);
        }
    }
}
