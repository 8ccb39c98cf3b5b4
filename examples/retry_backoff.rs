//! A flaky webhook retried with exponential backoff: one delivery succeeds
//! after a few failures, one never does and ends in the dead letters, from
//! where it is requeued once the "endpoint" is fixed.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example retry_backoff
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use delayqueue::{Backoff, Counts, DelayQueue, Event, HandlerError, Message, MessageState};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("example-webhooks", client)
        // 200 ms, 400 ms, 800 ms, ... up to 5 s; the default starts at 1 s.
        .backoff(Backoff::exponential(Duration::from_millis(200), Duration::from_secs(5)))
        .default_retry_count(3)
        .build()?;
    queue.purge().await?;

    // Print failures and deaths as they happen.
    let mut events = queue.events();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            match event {
                Event::Failed {
                    id,
                    attempt,
                    reason,
                    retry_in,
                    ..
                } => {
                    println!("  {id}: attempt {attempt} failed ({reason}); retry in {retry_in:.1?}")
                }
                Event::Dead {
                    id, attempt, reason, ..
                } => {
                    println!("  {id}: dead after attempt {attempt} ({reason})")
                }
                Event::Acked { id, .. } => println!("  {id}: delivered"),
                _ => {}
            }
        }
    });

    // The "endpoint": flaky answers 503 twice; broken answers 500 until fixed.
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let fixed = Arc::new(AtomicBool::new(false));
    let (calls, ok) = (flaky_calls.clone(), fixed.clone());
    let consumer = queue
        .start_consume(move |msg: Message| {
            let (calls, ok) = (calls.clone(), ok.clone());
            async move {
                match msg.payload() {
                    b"flaky" if calls.fetch_add(1, Ordering::SeqCst) < 2 => Err("HTTP 503".into()),
                    b"broken" if !ok.load(Ordering::SeqCst) => Err("HTTP 500".into()),
                    _ => Ok::<(), HandlerError>(()),
                }
            }
        })
        .await?;

    println!("sending two webhooks");
    queue.send("flaky").id("hook-flaky").await?;
    queue.send("broken").id("hook-broken").await?;
    let mut dead = Counts::default();
    dead.dead = 1;
    wait_for(&queue, dead).await?;

    for m in queue.list(MessageState::Dead, 0, 10).await?.items {
        println!(
            "dead letter {}: {} attempts, last error {:?}",
            m.id, m.attempts, m.last_error
        );
    }
    println!("fixing the endpoint and requeueing the dead letters");
    fixed.store(true, Ordering::SeqCst);
    let requeued = queue.requeue_all_dead().await?;
    println!("requeued {requeued}");
    wait_for(&queue, Counts::default()).await?;

    let status = queue.status().await?;
    println!(
        "done: sent {}, acked {}, failed deliveries {}, dead {}",
        status.totals.sent, status.totals.acked, status.totals.failed, status.totals.dead
    );
    consumer.shutdown().await?;
    queue.purge().await?;
    Ok(())
}

/// Polls the counts until they are `want` (at most 20 s).
async fn wait_for(queue: &DelayQueue, want: Counts) -> Result<(), Box<dyn std::error::Error>> {
    for _ in 0..400 {
        if queue.counts().await? == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("queue never reached {want:?}").into())
}
