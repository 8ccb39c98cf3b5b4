//! Rates and their history: the last samples of the totals of the queues
//! a page showed lately, kept in memory (the background task takes them);
//! a rate is the difference of two samples over the time between them.
//! Only watched queues are sampled, at most [`MAX_WATCHED`]: a page
//! watches the queues it shows, and a queue stays watched for the
//! history's length after that.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// Most queues sampled: five pages of the overview's largest page.
pub(crate) const MAX_WATCHED: usize = 1000;

/// The samples of the watched queues.
#[derive(Debug)]
pub(crate) struct Sampler {
    every: Duration,
    keep: usize,
    samples: Mutex<BTreeMap<String, VecDeque<Sample>>>,
    /// Queue -> when a page last showed it.
    watched: Mutex<HashMap<String, Instant>>,
}

impl Sampler {
    pub(crate) fn new(every: Duration, keep: usize) -> Self {
        Sampler {
            every,
            keep,
            samples: Mutex::new(BTreeMap::new()),
            watched: Mutex::new(HashMap::new()),
        }
    }

    /// The interval between samples.
    pub(crate) fn step(&self) -> Duration {
        self.every
    }

    /// How long a queue stays watched after a page showed it: the history's length.
    fn watch_for(&self) -> Duration {
        self.every.saturating_mul(u32::try_from(self.keep).unwrap_or(u32::MAX))
    }

    /// Marks the queues a page shows as watched now. Past [`MAX_WATCHED`],
    /// those shown longest ago are no longer watched.
    pub(crate) fn watch<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let now = Instant::now();
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        for name in names {
            match watched.get_mut(name) {
                Some(at) => *at = now,
                None => {
                    watched.insert(name.to_string(), now);
                }
            }
        }
        if watched.len() > MAX_WATCHED {
            let mut by_age: Vec<(Instant, String)> = watched.drain().map(|(n, at)| (at, n)).collect();
            by_age.sort_unstable_by_key(|(at, _)| std::cmp::Reverse(*at));
            watched.extend(by_age.into_iter().take(MAX_WATCHED).map(|(at, n)| (n, at)));
        }
    }

    /// The queues to sample now, in name order; forgets the samples of
    /// those no longer watched.
    pub(crate) fn watched(&self) -> Vec<String> {
        let watch_for = self.watch_for();
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        watched.retain(|_, at| at.elapsed() < watch_for);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.retain(|name, _| watched.contains_key(name));
        let mut names: Vec<String> = watched.keys().cloned().collect();
        names.sort_unstable();
        names
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

    #[test]
    fn only_watched_queues_are_sampled_and_at_most_max_watched() {
        let s = Sampler::new(Duration::from_secs(10), 3);
        assert!(s.watched().is_empty());
        s.watch(["b", "a"]);
        s.record("a", 0, totals(0, 0));
        s.record("gone", 0, totals(0, 0));
        assert_eq!(s.watched(), ["a", "b"]);
        // The samples of a queue no longer watched are dropped.
        assert!(s.history("gone").is_empty() && s.samples.lock().unwrap().len() == 1);
        let many: Vec<String> = (0..MAX_WATCHED + 10).map(|i| format!("q{i:05}")).collect();
        s.watch(many.iter().map(String::as_str));
        let watched = s.watched();
        assert_eq!(watched.len(), MAX_WATCHED);
        // Watched again last: still watched.
        s.watch(["a"]);
        assert!(s.watched().contains(&"a".to_string()));
        // Nothing stays watched longer than the history: a zero-length one forgets at once.
        let brief = Sampler::new(Duration::ZERO, 3);
        brief.watch(["a"]);
        assert!(brief.watched().is_empty());
    }
}
