//! Order timeouts: a shop closes every unpaid order some seconds after it
//! was placed. Schedules 300 "close order" messages due in 1-5 s, cancels
//! the ones that get paid meanwhile, and a consumer closes the rest.
//!
//! Run: `scripts/demo.sh` (or `cargo run --release --example demo` with
//! `REDIS_URL` pointing at a Redis 7).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayqueue::{DelayQueue, Handler, HandlerError, Json, Message, MessageId};
use serde::{Deserialize, Serialize};

const ORDERS: u64 = 300;

#[derive(Serialize, Deserialize)]
struct CloseOrder {
    order_id: u64,
    /// When the order times out, in ms since the epoch (for the lateness figures).
    due_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// A small deterministic pseudo-random number, so the demo needs no extra crate.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// The handler: closes an order, and counts it and how late it was.
#[derive(Default)]
struct Closer {
    closed: Arc<AtomicU64>,
    /// Per closed order, ms after its due time.
    lateness: Arc<Mutex<Vec<i64>>>,
}

#[delayqueue::async_trait]
impl Handler for Closer {
    async fn handle(&self, msg: Message) -> Result<(), HandlerError> {
        let order: CloseOrder = msg.json()?;
        self.lateness
            .lock()
            .unwrap()
            .push(now_ms() as i64 - order.due_ms as i64);
        self.closed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("demo:orders", client).concurrency(8).build()?;
    println!("delayqueue demo on {url}: {ORDERS} orders, each closed 1-5 s after it is placed unless paid");

    let closer = Closer::default();
    let (closed, lateness) = (closer.closed.clone(), closer.lateness.clone());
    let consumer = queue.start_consume(closer).await?;

    let mut placed: Vec<(u64, MessageId)> = Vec::new();
    for order_id in 1..=ORDERS {
        let timeout = Duration::from_millis(1000 + mix(order_id) % 4000);
        let due_ms = now_ms() + timeout.as_millis() as u64;
        let id = queue
            .send(Json(CloseOrder { order_id, due_ms }))
            .delay(timeout)
            .id(format!("order-{order_id}"))
            .await?;
        placed.push((order_id, id));
    }

    // About a third of the customers pay within a second: their timers are cancelled.
    let mut cancelled = 0u64;
    for (order_id, id) in &placed {
        if mix(order_id + 1_000_000).is_multiple_of(3) {
            tokio::time::sleep(Duration::from_millis(3)).await;
            if queue.cancel(id).await? {
                cancelled += 1;
            }
        }
    }

    let expected = ORDERS - cancelled;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = queue.counts().await?;
        let done = closed.load(Ordering::Relaxed);
        print!(
            "\r  pending {:>3}  ready {:>3}  processing {:>2}  |  closed {:>3}/{expected}  cancelled {cancelled}   ",
            s.pending, s.ready, s.processing, done
        );
        std::io::stdout().flush()?;
        if done >= expected || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!();
    consumer.shutdown().await?;

    let mut late = lateness.lock().unwrap().clone();
    late.sort_unstable();
    let pct = |p: f64| {
        late.get(((late.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    let early = late.iter().filter(|&&ms| ms < 0).count();
    println!(
        "summary: placed {ORDERS}, paid (cancelled) {cancelled}, closed {} of {expected}",
        closed.load(Ordering::Relaxed)
    );
    println!(
        "lateness vs due time: p50 {} ms, p99 {} ms, max {} ms, early {early}",
        pct(0.5),
        pct(0.99),
        late.last().copied().unwrap_or(0)
    );
    if closed.load(Ordering::Relaxed) != expected {
        return Err("not every unpaid order was closed".into());
    }
    Ok(())
}

/// The handler's unit tests, with the testing kit (docs/testing.md): no
/// Redis needed. `cargo test --features testing --example demo`.
#[cfg(all(test, feature = "testing"))]
mod tests {
    use delayqueue::testing::{TestMessage, Verdict};

    use super::*;

    #[tokio::test]
    async fn an_order_is_closed_and_counted() {
        let closer = Closer::default();
        let order = Json(CloseOrder {
            order_id: 7,
            due_ms: now_ms(),
        });
        let handled = TestMessage::new(order).id("order-7").run(&closer).await.unwrap();
        assert_eq!(handled.verdict, Verdict::Acked);
        assert_eq!(closer.closed.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_payload_that_is_no_order_is_retried_then_dead() {
        let closer = Closer::default();
        let first = TestMessage::new("not json").run(&closer).await.unwrap();
        assert!(matches!(first.verdict, Verdict::Retry { .. }), "{first:?}");
        let last = TestMessage::new("not json")
            .retry_count(3)
            .attempt(4)
            .run(&closer)
            .await
            .unwrap();
        assert!(matches!(last.verdict, Verdict::Dead { .. }), "{last:?}");
        assert_eq!(closer.closed.load(Ordering::Relaxed), 0);
    }
}
