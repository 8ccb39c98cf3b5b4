//! Time of one `browse` page and one 10,000-message `search` on a queue
//! with a large pending backlog (docs/performance.md, "Browse and search").
//!
//! Run against a throwaway Redis (it writes and purges queue `bench-browse`):
//!
//! ```text
//! redis-server --port 6391 --save '' --appendonly no --daemonize yes
//! REDIS_URL=redis://127.0.0.1:6391 cargo run --release --example browse_bench -- --pending 1000000
//! ```
//!
//! Prints one JSON line: median and max ms of each call over `--rounds`
//! (default 20) calls.

use std::time::{Duration, Instant};

use delayqueue::{DelayQueue, MessageState, NewMessage, Order};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Milliseconds of each call: (median, max).
fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({ "median_ms": ms[ms.len() / 2], "max_ms": ms[ms.len() - 1] })
}

/// Times `rounds` runs of `f`.
async fn time<F, Fut, T>(rounds: usize, mut f: F) -> Res<serde_json::Value>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::IntoFuture<Output = Result<T, delayqueue::Error>>,
{
    let mut ms = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let t = Instant::now();
        f(i).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(summary(ms))
}

#[tokio::main]
async fn main() -> Res<()> {
    let mut pending = 1_000_000usize;
    let mut rounds = 20usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let val = args.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--pending" => pending = val.parse()?,
            "--rounds" => rounds = val.parse()?,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let q = DelayQueue::builder("bench-browse", client).build()?;
    q.purge().await?;
    let load = Instant::now();
    let payload = [b'x'; 100];
    for start in (0..pending).step_by(10_000) {
        let msgs = (start..(start + 10_000).min(pending))
            .map(|i| NewMessage::new(payload.to_vec()).delay(Duration::from_secs(3600 + (i % 86_400) as u64)));
        for r in q.send_batch(msgs).await? {
            r?;
        }
    }
    let load_s = load.elapsed().as_secs_f64();
    let state = MessageState::Pending;
    // A cursor in the middle of the backlog, from a walk of 10 pages of 1000.
    let (mut middle, mut last_id) = (None, None);
    for _ in 0..10 {
        let page = q.browse(state).after(middle).limit(1000).await?;
        last_id = page.items.last().map(|m| m.id.clone());
        middle = page.cursor;
    }
    let first = time(rounds, |_| q.browse(state).limit(100)).await?;
    let next = time(rounds, |_| q.browse(state).after(middle.clone()).limit(100)).await?;
    let desc = time(rounds, |_| q.browse(state).order(Order::Desc).limit(100)).await?;
    // The cursor's own message is gone: the walk finds its place by binary search.
    if let Some(id) = last_id {
        q.cancel(&id).await?;
    }
    let gone = time(rounds, |_| q.browse(state).after(middle.clone()).limit(100)).await?;
    let list = time(rounds, |_| q.list(state, 500_000.min(pending / 2), 100)).await?;
    // Text that no payload holds: every search reads its whole budget.
    let search = time(rounds, |_| q.search(state, "needle").after(middle.clone()).scan(10_000)).await?;
    let search_limit = q.search(state, "needle").scan(10_000).await?;
    assert_eq!(search_limit.scanned, 10_000);
    println!(
        "{}",
        json!({
            "pending": q.counts().await?.pending,
            "load_s": load_s,
            "browse_first_page_100": first,
            "browse_page_100_after_cursor": next,
            "browse_desc_page_100": desc,
            "browse_page_100_after_gone_cursor": gone,
            "list_offset_page_100": list,
            "search_scan_10000": search,
        })
    );
    q.purge().await?;
    Ok(())
}
