//! What a link sends its agent, and when (D2, D79, D86). Something goes at least every
//! heartbeat interval; a heartbeat fills only the gaps the fleet's messages leave, on the
//! grid of D79. An ack of a batch is not urgent (it only spares the batch a resend after a
//! reconnect), so it waits for the next beat and goes in the heartbeat's place: a batch
//! then costs the coordinator no message of its own, and the link keeps to the grid.
//! Every other message goes at once.

use std::ops::{Add, Sub};
use std::time::Duration;
use surge_core::beat::Beat;
use surge_proto::{CoordinatorMsg, Heartbeat, coordinator_msg::Msg};

/// One link's outgoing schedule; generic over the instant type, as [`Beat`] is.
#[derive(Debug)]
pub(super) struct Outgoing<I> {
    beat: Beat<I>,
    /// Acks waiting for the next beat, in the order they came.
    held: Vec<CoordinatorMsg>,
}

impl<I: Copy + Ord + Add<Duration, Output = I> + Sub<I, Output = Duration>> Outgoing<I> {
    pub(super) fn new(beat: Beat<I>) -> Self {
        Self { beat, held: Vec::new() }
    }

    /// A message of the fleet's for the agent at `now`: what goes now. An ack is held for
    /// the next beat (`None`); anything else goes at once and stands in for a heartbeat.
    pub(super) fn message(&mut self, m: CoordinatorMsg, now: I) -> Option<CoordinatorMsg> {
        if matches!(m.msg, Some(Msg::Ack(_))) {
            self.held.push(m);
            return None;
        }
        self.beat.sent(now);
        Some(m)
    }

    /// When the link's beat timer next wakes it: at most one interval on.
    pub(super) fn due(&self) -> I {
        self.beat.due()
    }

    /// The beat timer at `now`, when the wall clock reads `unix_ns`: the acks held since
    /// the last beat go to `send`, in the heartbeat's place; without any, the heartbeat if
    /// one is due.
    pub(super) fn at_beat(&mut self, now: I, unix_ns: i64, mut send: impl FnMut(CoordinatorMsg)) {
        let due = self.beat.fire(now);
        if !self.held.is_empty() {
            self.held.drain(..).for_each(&mut send);
            self.beat.sent(now);
        } else if due {
            send(CoordinatorMsg { msg: Some(Msg::Heartbeat(Heartbeat { sent_unix_ns: unix_ns })) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use surge_proto::{Ack, Stop};

    const IV: Duration = Duration::from_millis(100);
    const fn ms(t: u64) -> Duration {
        Duration::from_millis(t)
    }

    fn ack(seq: u64) -> CoordinatorMsg {
        CoordinatorMsg { msg: Some(Msg::Ack(Ack { run_id: 1, seq })) }
    }

    /// A schedule started at 0 with the grid at whole 100 ms, its first beat at once.
    fn outgoing() -> Outgoing<Duration> {
        Outgoing::new(Beat::new(IV, ms(0), 0, ms(0)))
    }

    /// What the beat timer sends at `t`: "hb" or the acks' sequence numbers.
    fn beat(o: &mut Outgoing<Duration>, t: u64) -> Vec<String> {
        let mut sent = Vec::new();
        o.at_beat(ms(t), t as i64 * 1_000_000, |m| {
            sent.push(match m.msg {
                Some(Msg::Heartbeat(_)) => "hb".to_string(),
                Some(Msg::Ack(a)) => format!("ack {}", a.seq),
                other => format!("{other:?}"),
            })
        });
        sent
    }

    #[test]
    fn acks_wait_for_the_beat_and_go_in_the_heartbeats_place() {
        let mut o = outgoing();
        assert_eq!(beat(&mut o, 0), ["hb"]);
        assert!(o.message(ack(7), ms(30)).is_none(), "held");
        assert!(o.message(ack(8), ms(31)).is_none(), "held");
        assert_eq!(o.due(), ms(100), "the timer is not moved by an ack");
        assert_eq!(beat(&mut o, 100), ["ack 7", "ack 8"], "in their order, and no heartbeat");
        assert_eq!(o.due(), ms(200), "the grid goes on");
        assert_eq!(beat(&mut o, 200), ["hb"]);
        // Anything else goes at once and stands in for the heartbeat, as before.
        let stop = CoordinatorMsg { msg: Some(Msg::Stop(Stop { run_id: 1, reason: "x".into() })) };
        assert_eq!(o.message(stop.clone(), ms(250)), Some(stop));
        assert!(beat(&mut o, 300).is_empty(), "the stop went 50 ms ago");
        assert_eq!(o.due(), ms(350));
        assert_eq!(beat(&mut o, 350), ["hb"]);
    }

    /// Ten seconds of a sparse fleet's acks (one batch every 250 ms, arriving 3 ms after
    /// the grid): as many messages as an idle link sends, all on the grid, no gap over the
    /// interval and no ack held longer than it. Sending each ack at once, as the link did
    /// before D86, sends 40 messages more, 40 of them off the grid.
    #[test]
    fn a_sparse_fleets_acks_cost_no_message_and_keep_the_grid() {
        let mut o = outgoing();
        let (mut sent, mut arrivals) = (Vec::new(), (0..40u64).map(|k| (3 + 250 * k, k)).peekable());
        let mut held_since = Vec::new();
        while o.due() <= ms(10_000) {
            let t = o.due().as_millis() as u64;
            while let Some(&(at, seq)) = arrivals.peek().filter(|(at, _)| *at < t) {
                if let Some(m) = o.message(ack(seq), ms(at)) {
                    sent.push((at, m));
                }
                held_since.push(at);
                arrivals.next();
            }
            o.at_beat(ms(t), t as i64 * 1_000_000, |m| {
                if matches!(m.msg, Some(Msg::Ack(_))) {
                    let since = held_since.remove(0);
                    assert!(t - since <= 100, "an ack held from {since} to {t}");
                }
                sent.push((t, m));
            });
        }
        let acks = sent.iter().filter(|(_, m)| matches!(m.msg, Some(Msg::Ack(_)))).count();
        assert_eq!(acks, 40, "every ack goes");
        assert_eq!(sent.len(), 101, "0, 100, ..., 10000: an idle link's count");
        let times: Vec<u64> = sent.iter().map(|(t, _)| *t).collect();
        assert!(times.iter().all(|t| t % 100 == 0), "on the grid: {times:?}");
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 100), "a gap over the interval: {times:?}");
    }
}
