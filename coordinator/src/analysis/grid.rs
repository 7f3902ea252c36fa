//! The time series' slices and the views that share them (D90): slices of `--timeslice`
//! until a run would need more than [`MOST_SLICES`], then twice as wide, neighbours merged,
//! as often as the run's length asks. One [`Grid`] is shared by the time series and every
//! view sliced alike (the server's, the GPUs', the endpoints'), so they end at one width;
//! each [`Slices`] catches up with the grid when it is next touched, and at its end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The most slices a run holds: an hour of one-second slices fits; a day of them ends as
/// 2,700 slices of 32 s.
pub const MOST_SLICES: i64 = 4096;

/// The slices' width: the asked one doubled as often as the run's length needed.
#[derive(Debug, Clone)]
pub struct Grid {
    base_s: f64,
    doublings: Arc<AtomicU32>,
}

impl Grid {
    pub fn new(slice_s: f64) -> Self {
        Self { base_s: if slice_s > 0.0 && slice_s.is_finite() { slice_s } else { 1.0 }, doublings: Arc::default() }
    }

    fn doublings(&self) -> u32 {
        self.doublings.load(Ordering::Relaxed)
    }

    fn width_at(&self, doublings: u32) -> f64 {
        self.base_s * 2f64.powi(doublings as i32)
    }

    /// The width now, seconds.
    pub fn width_s(&self) -> f64 {
        self.width_at(self.doublings())
    }

    /// Widens the grid until the slice of `t` (seconds from the start) is within
    /// [`MOST_SLICES`].
    fn reach(&self, t: f64) {
        let mut d = self.doublings();
        // 64 doublings of 10 ms exceed any time a run can have (D88: a year at most).
        while d < 64 && (t.max(0.0) / self.width_at(d)).floor() >= MOST_SLICES as f64 {
            d += 1;
        }
        self.doublings.fetch_max(d, Ordering::Relaxed);
    }
}

/// What a slice holds: two neighbours merge into one slice twice as wide.
pub trait Merge: Default {
    fn merge(&mut self, other: Self);
}

/// One view's slices on the shared grid, by index from the run's start.
#[derive(Debug)]
pub struct Slices<X> {
    grid: Grid,
    doublings: u32,
    /// This view's width, and the first time past its last slice (MOST_SLICES of them):
    /// a time below it, with the grid not widened since, needs no more than a division.
    width_s: f64,
    limit_s: f64,
    map: BTreeMap<i64, X>,
}

impl<X: Merge> Slices<X> {
    pub fn new(grid: Grid) -> Self {
        let width_s = grid.width_at(0);
        Self { grid, doublings: 0, width_s, limit_s: width_s * MOST_SLICES as f64, map: BTreeMap::new() }
    }

    /// The index of the slice of `t`, the grid first widened for it and this view caught
    /// up with the grid.
    pub fn index(&mut self, t: f64) -> i64 {
        let t = t.max(0.0);
        if t >= self.limit_s || self.doublings != self.grid.doublings() {
            self.grid.reach(t);
            self.catch_up();
        }
        (t / self.width_s).floor() as i64
    }

    /// The slice of `t`, made empty if new.
    pub fn at(&mut self, t: f64) -> &mut X {
        let i = self.index(t);
        self.map.entry(i).or_default()
    }

    /// The slice at `i` (an index at the present width), made empty if new.
    pub fn slot(&mut self, i: i64) -> &mut X {
        self.map.entry(i).or_default()
    }

    pub fn get(&self, i: i64) -> Option<&X> {
        self.map.get(&i)
    }

    /// This view's width, seconds (the grid's once caught up).
    pub fn width_s(&self) -> f64 {
        self.width_s
    }

    pub fn range_mut(&mut self, upto: i64) -> impl Iterator<Item = (&i64, &mut X)> {
        self.map.range_mut(..=upto)
    }

    /// Merges neighbours until this view is as wide as the grid.
    fn catch_up(&mut self) {
        while self.doublings < self.grid.doublings() {
            let narrow = std::mem::take(&mut self.map);
            for (i, x) in narrow {
                match self.map.entry(i.div_euclid(2)) {
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(x);
                    }
                    std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().merge(x),
                }
            }
            self.doublings += 1;
        }
        self.width_s = self.grid.width_at(self.doublings);
        self.limit_s = self.width_s * MOST_SLICES as f64;
    }

    /// The slices at the grid's final width, and that width.
    pub fn finish(mut self) -> (BTreeMap<i64, X>, f64) {
        self.catch_up();
        let width = self.width_s();
        (self.map, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Clone, PartialEq)]
    struct Count(u64);
    impl Merge for Count {
        fn merge(&mut self, other: Self) {
            self.0 += other.0;
        }
    }

    /// However long the run, a view holds at most MOST_SLICES slices, counts none twice
    /// and loses none, and two views on one grid end at the same width.
    #[test]
    fn a_long_run_widens_the_slices_and_every_view_alike() {
        let grid = Grid::new(1.0);
        let (mut a, mut b) = (Slices::<Count>::new(grid.clone()), Slices::<Count>::new(grid.clone()));
        let seconds = 86_400u64;
        for s in 0..seconds {
            a.at(s as f64 + 0.5).0 += 1;
            if s < 100 {
                b.at(s as f64).0 += 2;
            }
        }
        let (am, aw) = a.finish();
        let (bm, bw) = b.finish();
        assert_eq!((aw, bw), (32.0, 32.0), "a day of 1 s slices ends at 32 s");
        assert!(am.len() as i64 <= MOST_SLICES && am.keys().all(|&i| i < MOST_SLICES));
        assert_eq!(am.values().map(|c| c.0).sum::<u64>(), seconds);
        assert_eq!(am.get(&0), Some(&Count(32)));
        assert_eq!(bm.values().map(|c| c.0).sum::<u64>(), 200, "the view touched early caught up at its end");
        assert_eq!((bm.get(&0), bm.get(&3)), (Some(&Count(64)), Some(&Count(8))));
    }

    /// A run within MOST_SLICES keeps the asked width, its last slice included.
    #[test]
    fn a_run_within_the_bound_keeps_its_width() {
        let mut a = Slices::<Count>::new(Grid::new(0.5));
        a.at(0.0).0 += 1;
        a.at((MOST_SLICES as f64 - 0.5) * 0.5).0 += 1;
        let (m, w) = a.finish();
        assert_eq!((w, m.len()), (0.5, 2));
        assert!(m.contains_key(&(MOST_SLICES - 1)));
        let mut b = Slices::<Count>::new(Grid::new(0.5));
        b.at(MOST_SLICES as f64 * 0.5).0 += 1;
        assert_eq!(b.finish().1, 1.0, "one slice past the bound doubles the width");
    }
}
