//! Rates and their history: the last samples of every queue's totals, kept
//! in memory (the background task takes them); a rate is the difference
//! of two samples over the time between them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use crate::Totals;

/// Messages per second over one sample interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    pub sent: f64,
    pub acked: f64,
    pub failed: f64,
    pub dead: f64,
}

/// The rates between two samples, ending at `t_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub t_ms: u64,
    pub rates: Rates,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    t_ms: u64,
    totals: Totals,
}

/// The samples of every queue.
#[derive(Debug)]
pub(crate) struct Sampler {
    every: Duration,
    keep: usize,
    samples: Mutex<BTreeMap<String, VecDeque<Sample>>>,
}

impl Sampler {
    pub(crate) fn new(every: Duration, keep: usize) -> Self {
        Sampler {
            every,
            keep,
            samples: Mutex::new(BTreeMap::new()),
        }
    }

    /// The interval between samples.
    pub(crate) fn step(&self) -> Duration {
        self.every
    }

    pub(crate) fn record(&self, queue: &str, t_ms: u64, totals: Totals) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let kept = samples.entry(queue.to_string()).or_default();
        // One more sample than points: each point needs two.
        if kept.len() > self.keep {
            kept.pop_front();
        }
        kept.push_back(Sample { t_ms, totals });
    }

    /// The rates over the last interval; zero until two samples exist.
    pub(crate) fn rates(&self, queue: &str) -> Rates {
        self.history(queue).last().map(|p| p.rates).unwrap_or_default()
    }

    /// The rates between each two consecutive samples, oldest first.
    pub(crate) fn history(&self, queue: &str) -> Vec<Point> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let Some(kept) = samples.get(queue) else {
            return Vec::new();
        };
        kept.iter()
            .zip(kept.iter().skip(1))
            .map(|(a, b)| Point {
                t_ms: b.t_ms,
                rates: between(a, b),
            })
            .collect()
    }
}

fn between(a: &Sample, b: &Sample) -> Rates {
    let secs = b.t_ms.saturating_sub(a.t_ms) as f64 / 1000.0;
    // A purge resets the totals: no negative rate.
    let rate = |x: u64, y: u64| {
        if secs > 0.0 {
            y.saturating_sub(x) as f64 / secs
        } else {
            0.0
        }
    };
    let (x, y) = (a.totals, b.totals);
    Rates {
        sent: rate(x.sent, y.sent),
        acked: rate(x.acked, y.acked),
        failed: rate(x.failed, y.failed),
        dead: rate(x.dead, y.dead),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sent: u64, acked: u64) -> Totals {
        Totals {
            sent,
            acked,
            ..Totals::default()
        }
    }

    #[test]
    fn rates_are_differences_over_time_and_history_is_bounded() {
        let s = Sampler::new(Duration::from_secs(10), 3);
        assert_eq!(s.rates("q"), Rates::default());
        s.record("q", 0, totals(0, 0));
        assert_eq!(s.rates("q"), Rates::default());
        s.record("q", 10_000, totals(50, 20));
        assert_eq!(s.rates("q").sent, 5.0);
        assert_eq!(s.rates("q").acked, 2.0);
        // A purge (totals back to 0) is no negative rate.
        s.record("q", 20_000, totals(0, 0));
        assert_eq!(s.rates("q").sent, 0.0);
        for t in 3..10 {
            s.record("q", t * 10_000, totals(t, t));
        }
        let h = s.history("q");
        assert_eq!(h.len(), 3);
        assert_eq!(h.last().map(|p| p.t_ms), Some(90_000));
        assert!(s.history("other").is_empty());
    }
}
