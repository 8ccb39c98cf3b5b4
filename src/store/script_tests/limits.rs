//! limits.lua and the limits claim.lua enforces: concurrency and rate.

use std::time::Duration;

use crate::store::ops::claim::Held;
use crate::store::ops::limits::{Limit, SetLimit};
use crate::store::ops::stats::Stats;
use crate::store::Keys;

use super::{ms, Env, VIS};

#[tokio::test]
async fn limits_are_set_and_cleared_once_and_wake_consumers() {
    let env = Env::new().await;
    let k = env.k().clone();
    let mut wakes = env.subscribe().await;
    let rate = |r| SetLimit { limit: Limit::Rate(r) };
    let conc = |n| SetLimit {
        limit: Limit::Concurrency(n),
    };
    assert!(env.run(&rate(Some((100, 1000)))).await);
    assert_eq!(wakes.next().await, "0", "a changed limit wakes consumers");
    assert!(env.run(&conc(Some(7))).await);
    assert_eq!(wakes.next().await, "0");
    assert_eq!(env.raw(&["HGET", &k.totals, "rate"]), "100 1000");
    assert_eq!(env.raw(&["HGET", &k.totals, "concurrency"]), "7");
    let status = env.run(&Stats).await;
    assert_eq!(
        (status.rate_limit, status.global_concurrency),
        (Some(crate::RateLimit::new(100, ms(1000))), Some(7))
    );
    // The same value again changes nothing and wakes nobody.
    assert!(!env.run(&rate(Some((100, 1000)))).await);
    assert!(!env.run(&conc(Some(7))).await);
    wakes.assert_quiet(&env, "unchanged limits").await;
    // A new rate starts with a full window.
    env.raw(&["HSET", &k.totals, "rate_used", "1 5"]);
    assert!(env.run(&rate(Some((50, 1000)))).await);
    assert_eq!(
        env.int(&["HEXISTS", &k.totals, "rate_used"]),
        0,
        "the old rate's count stays"
    );
    assert!(env.run(&rate(None)).await);
    assert!(env.run(&conc(None)).await);
    assert!(!env.exists(&k.totals), "cleared limits leave no field behind");
    let status = env.run(&Stats).await;
    assert_eq!((status.rate_limit, status.global_concurrency), (None, None));
    // A value the claim could not read is refused before any write.
    let op = rate(Some((1, 1)));
    let err = env
        .run_with_arg(&op, 2, "1 x".into())
        .await
        .expect_err("a malformed rate");
    assert!(format!("{err:?}").contains("invalid limit"), "{err:?}");
    assert!(!env.exists(&k.totals));
}

#[tokio::test]
async fn a_global_concurrency_limit_leases_only_free_slots() {
    let env = Env::new().await;
    let k = env.k().clone();
    for id in ["a", "b", "c", "d", "e"] {
        env.seed(id, None);
        env.raw(&["RPUSH", &k.ready, id]);
    }
    env.run(&SetLimit {
        limit: Limit::Concurrency(Some(3)),
    })
    .await;
    let first = env.claim(2).await;
    assert_eq!((first.ids(), first.held), (vec!["a", "b"], None), "within the limit");
    let second = env.claim(10).await;
    assert_eq!((second.ids(), second.held), (vec!["c"], Some(Held::Concurrency)));
    // Full: no list is read, nothing changes but the receipt.
    let state = env.snapshot();
    env.reset_command_stats();
    let full = env.claim(10).await;
    assert_eq!((full.popped, full.held), (0, Some(Held::Concurrency)));
    assert_eq!(env.command_calls("lrange"), 0, "a list was read");
    assert_eq!(env.snapshot(), state);
    // A finished delivery frees its slot.
    env.raw(&["ZREM", &k.processing, "a"]);
    let next = env.claim(10).await;
    assert_eq!((next.ids(), next.held), (vec!["d"], Some(Held::Concurrency)));
    // Fewer waiting than the limit allows: not held back.
    env.raw(&["ZREM", &k.processing, "b", "c"]);
    let last = env.claim(10).await;
    assert_eq!((last.ids(), last.held), (vec!["e"], None));
}

/// A queue with ten messages m0..m9 ready and a rate limit of 100 per
/// 50 s: buckets of 1 s, at most 2 per bucket.
async fn ten_ready_under_a_rate() -> (Env, Keys) {
    let env = Env::new().await;
    let k = env.k().clone();
    for i in 0..10 {
        let id = format!("m{i}");
        env.seed(&id, None);
        env.raw(&["RPUSH", &k.ready, &id]);
    }
    env.run(&SetLimit {
        limit: Limit::Rate(Some((100, 50_000))),
    })
    .await;
    (env, k)
}

impl Env {
    /// The totals' `rate_used`, and its numbers: the bucket, then the counts.
    fn rate_used(&self) -> (String, Vec<i64>) {
        let used = self.raw(&["HGET", &self.k().totals, "rate_used"]);
        let words = used.split(' ').map(|w| w.parse().unwrap()).collect();
        (used, words)
    }
}

#[tokio::test]
async fn a_rate_limit_counts_leases_in_its_window_and_says_when_it_opens() {
    let (env, k) = ten_ready_under_a_rate().await;
    let bucket = env.now_ms() / 1000;
    // 98 leased in the bucket before this one.
    env.raw(&["HSET", &k.totals, "rate_used", &format!("{} 98", bucket - 1)]);
    let got = env.claim(10).await;
    assert_eq!(got.ids(), vec!["m0", "m1"], "what is left of the window");
    // The window opens again when the bucket of the 98 leaves it, 50 s on.
    let Some(Held::Rate { wait }) = got.held else {
        panic!("not held by the rate: {got:?}")
    };
    assert!((ms(47_000)..=ms(50_000)).contains(&wait), "{wait:?}");
    let (used, words) = env.rate_used();
    assert!(words[0] == bucket || words[0] == bucket + 1, "{used} at {bucket}");
    assert_eq!(words[1..].iter().sum::<i64>(), 100, "{used}");
    assert_eq!(words[1], 2, "this bucket's leases come first: {used}");
    // The window is full: no list is read.
    let state = env.snapshot();
    env.reset_command_stats();
    let full = env.claim(10).await;
    assert_eq!(full.popped, 0);
    assert!(
        matches!(full.held, Some(Held::Rate { wait }) if wait >= ms(47_000)),
        "{full:?}"
    );
    assert_eq!(env.command_calls("lrange"), 0, "a list was read");
    assert_eq!(env.snapshot(), state);
}

#[tokio::test]
async fn a_rate_limit_counts_the_leases_of_a_window_stamped_ahead_of_a_clock_stepped_back() {
    let (env, k) = ten_ready_under_a_rate().await;
    // The window was filled while Redis's clock read 30 s later than it
    // reads now: the clock stepped back since.
    let bucket = env.now_ms() / 1000;
    env.raw(&["HSET", &k.totals, "rate_used", &format!("{} 100", bucket + 30)]);
    let got = env.claim(10).await;
    assert!(got.ids().is_empty(), "leased past the rate: {got:?}");
    let Some(Held::Rate { wait }) = got.held else {
        panic!("not held by the rate: {got:?}")
    };
    // Counted in this bucket: the window opens when it leaves, 50 s on.
    assert!((ms(50_000)..=ms(51_000)).contains(&wait), "{wait:?}");
    let (used, words) = env.rate_used();
    assert_eq!(words[1..].iter().sum::<i64>(), 100, "{used}");
}

#[tokio::test]
async fn a_rate_limit_never_leases_more_than_its_limit_in_any_window() {
    let env = Env::new().await;
    let k = env.k().clone();
    for i in 0..300 {
        let id = format!("m{i}");
        env.seed(&id, None);
        env.raw(&["RPUSH", &k.ready, &id]);
    }
    // 20 per 100 ms: at most 1 per 2 ms bucket.
    let (n, period_us) = (20u64, 100_000i64);
    env.run(&SetLimit {
        limit: Limit::Rate(Some((n, period_us as u64 / 1000))),
    })
    .await;
    // Each lease is Redis's time of the claim + VIS. A claim that leased
    // nothing is bracketed by Redis's time before and after it.
    let mut leases = Vec::new();
    let mut refused = Vec::new();
    let start = std::time::Instant::now();
    for _ in 0..20_000 {
        if start.elapsed() > Duration::from_secs(1) && leases.len() >= 3 * n as usize {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            break;
        }
        let before = env.now_us();
        let got = env.claim(50).await;
        if got.got.is_empty() {
            assert!(matches!(got.held, Some(Held::Rate { .. })), "held by what? {got:?}");
            refused.push((before, env.now_us()));
        }
        leases.extend(std::iter::repeat_n(got.lease - VIS * 1000, got.got.len()));
    }
    assert!(leases.len() >= 3 * n as usize, "only {} leases in 30 s", leases.len());
    for (i, &t) in leases.iter().enumerate() {
        let in_window = leases[i..].iter().take_while(|&&u| u < t + period_us).count();
        assert!(in_window <= n as usize, "{in_window} leases in the window from {t}");
    }
    // Paced, not starved: a claim is refused only when its bucket holds
    // its share (ceil(n / 50)) or its bucket and the 50 before hold n
    // leases (docs/limits.md). Its bucket is one of those its bracket
    // spans, however slow the claim was.
    let bucket_us = period_us / 50;
    let share = n.div_ceil(50) as usize;
    let in_buckets = |from: i64, to: i64| {
        leases
            .iter()
            .filter(|&&t| (from..=to).contains(&(t / bucket_us)))
            .count()
    };
    for (before, after) in refused {
        let justified = (before / bucket_us..=after / bucket_us)
            .any(|b| in_buckets(b, b) >= share || in_buckets(b - 50, b) >= n as usize);
        assert!(justified, "refused in {before}..={after} with room in the rate");
    }
}
