//! What a link sends its agent, and when (D2, D79, D86). Something goes at least every
//! heartbeat interval; a heartbeat fills only the gaps the fleet's messages leave, on the
//! grid of D79. An ack of a batch is not urgent (it only spares the batch a resend after a
//! reconnect), so it waits for the next beat and goes in the heartbeat's place: a batch
//! then costs the coordinator no message of its own, and the link keeps to the grid.
//! Every other message goes at once. The link itself owes the ack of each batch it hands
//! on (D94): the collection loop does not send one back through it.

use super::incoming::RowBatch;
use std::ops::{Add, Sub};
use std::time::Duration;
use surge_core::beat::Beat;
use surge_proto::{Ack, CoordinatorMsg, Heartbeat, coordinator_msg::Msg};

/// The ack a link owes its agent for a batch it hands on to the collection (D94): one
/// for every batch, of this run or of an earlier one (resent after a resume because its
/// ack was lost with the old connection), or the agent keeps it for the session.
pub(super) fn ack_for(b: &RowBatch) -> CoordinatorMsg {
    CoordinatorMsg { msg: Some(Msg::Ack(Ack { run_id: b.run_id, seq: b.seq })) }
}

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

    /// A message of the fleet's for the agent at `now`. An ack is held for the next beat;
    /// anything else goes to `send` at once, after the acks held so far (so a run's acks
    /// never fall behind the next run's Start), and stands in for a heartbeat.
    pub(super) fn message(&mut self, m: CoordinatorMsg, now: I, mut send: impl FnMut(CoordinatorMsg)) {
        if matches!(m.msg, Some(Msg::Ack(_))) {
            self.held.push(m);
            return;
        }
        self.held.drain(..).for_each(&mut send);
        send(m);
        self.beat.sent(now);
    }

    /// A batch from the agent, handed on to the collection: the ack it is owed (D94)
    /// waits for the next beat, as any ack does.
    pub(super) fn received(&mut self, b: &RowBatch) {
        self.held.push(ack_for(b));
    }

    /// When the link's beat timer next wakes it: at most one interval on.
    pub(super) fn due(&self) -> I {
        self.beat.due()
    }

    /// The beat timer at `now`, when the wall clock reads `unix_ns`: the acks held since
    /// the last beat go to `send`, in the heartbeat's place; without any, the heartbeat if
    /// one is due. Acks sent in a due heartbeat's place leave the schedule on the grid, as
    /// the heartbeat would (marking them sent would date the next beat from this wake-up,
    /// which comes a little after the grid's point); sent at a wake-up that was not due,
    /// they stand in for the next heartbeat as any message does.
    pub(super) fn at_beat(&mut self, now: I, unix_ns: i64, mut send: impl FnMut(CoordinatorMsg)) {
        let due = self.beat.fire(now);
        if !self.held.is_empty() {
            self.held.drain(..).for_each(&mut send);
            if !due {
                self.beat.sent(now);
            }
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

    fn name(m: &CoordinatorMsg) -> String {
        match &m.msg {
            Some(Msg::Heartbeat(_)) => "hb".to_string(),
            Some(Msg::Ack(a)) => format!("ack {}", a.seq),
            Some(Msg::Stop(_)) => "stop".to_string(),
            other => format!("{other:?}"),
        }
    }

    /// What the beat timer sends at `t`.
    fn beat(o: &mut Outgoing<Duration>, t: u64) -> Vec<String> {
        let mut sent = Vec::new();
        o.at_beat(ms(t), t as i64 * 1_000_000, |m| sent.push(name(&m)));
        sent
    }

    /// What goes at once when the fleet hands the link `m` at `t`.
    fn message(o: &mut Outgoing<Duration>, m: CoordinatorMsg, t: u64) -> Vec<String> {
        let mut sent = Vec::new();
        o.message(m, ms(t), |m| sent.push(name(&m)));
        sent
    }

    #[test]
    fn acks_wait_for_the_beat_and_go_in_the_heartbeats_place() {
        let mut o = outgoing();
        assert_eq!(beat(&mut o, 0), ["hb"]);
        assert!(message(&mut o, ack(7), 30).is_empty(), "held");
        assert!(message(&mut o, ack(8), 31).is_empty(), "held");
        assert_eq!(o.due(), ms(100), "the timer is not moved by an ack");
        assert_eq!(beat(&mut o, 100), ["ack 7", "ack 8"], "in their order, and no heartbeat");
        assert_eq!(o.due(), ms(200), "the grid goes on");
        assert_eq!(beat(&mut o, 200), ["hb"]);
        // Anything else goes at once, after the acks held so far, and stands in for the
        // heartbeat, as before.
        let stop = CoordinatorMsg { msg: Some(Msg::Stop(Stop { run_id: 1, reason: "x".into() })) };
        assert!(message(&mut o, ack(9), 240).is_empty());
        assert_eq!(message(&mut o, stop, 250), ["ack 9", "stop"], "the ack first");
        assert!(beat(&mut o, 300).is_empty(), "the stop went 50 ms ago");
        assert_eq!(o.due(), ms(350));
        assert_eq!(beat(&mut o, 350), ["hb"]);
    }

    /// Ten seconds of a sparse fleet's acks (one batch every 250 ms, arriving 5 ms after
    /// the grid), with the timer waking 0 to 3 ms late as a real one does: as many messages
    /// as an idle link sends, one at every wake-up, each within the lateness of a grid
    /// point, no gap over the interval and its lateness, and no ack held longer. Sending
    /// each ack at once, as the link did before D86, sends 40 messages more, off the grid;
    /// dating the next beat from an ack's late wake-up adds wake-ups that send nothing.
    #[test]
    fn a_sparse_fleets_acks_cost_no_message_and_keep_the_grid() {
        let mut o = outgoing();
        let (mut sent, mut arrivals) = (Vec::new(), (0..40u64).map(|k| (5 + 250 * k, k)).peekable());
        let (mut held_since, mut wakes) = (Vec::new(), 0);
        while o.due() <= ms(10_000) {
            let t = o.due().as_millis() as u64 + [0, 3, 1][wakes % 3];
            wakes += 1;
            while let Some(&(at, seq)) = arrivals.peek().filter(|(at, _)| *at < t) {
                o.message(ack(seq), ms(at), |m| sent.push((at, m)));
                held_since.push(at);
                arrivals.next();
            }
            let before = sent.len();
            o.at_beat(ms(t), t as i64 * 1_000_000, |m| {
                if matches!(m.msg, Some(Msg::Ack(_))) {
                    let since = held_since.remove(0);
                    assert!(t - since <= 100, "an ack held from {since} to {t}");
                }
                sent.push((t, m));
            });
            assert!(sent.len() > before, "a wake-up at {t} sent nothing");
        }
        let acks = sent.iter().filter(|(_, m)| matches!(m.msg, Some(Msg::Ack(_)))).count();
        assert_eq!(acks, 40, "every ack goes");
        assert_eq!(sent.len(), 101, "0, 100, ..., 10000: an idle link's count");
        let times: Vec<u64> = sent.iter().map(|(t, _)| *t).collect();
        assert!(times.iter().all(|t| t % 100 <= 3), "on the grid: {times:?}");
        assert!(times.windows(2).all(|w| w[1] - w[0] <= 103), "a gap over the interval: {times:?}");
    }
}
