//! Big payloads: a consumer drains a queue of 600 KiB to 1 MiB messages
//! completely, each delivered once with its payload whole, although each
//! claim call leases at most 1 MiB of them (lua/claim.lua): a claim cut
//! short by its byte budget is followed by the next at once, not at the
//! next `fetch_interval`.

mod helpers;
use delayqueue_test_support as support;

use std::time::Duration;

use delayqueue::{Counts, MessageId, NewMessage};
use helpers::{acking, start_queue, wait_stats, Log};
use support::{wait_until, WAIT};

/// Long enough that a consumer waiting for its tick would not drain the
/// queue within `WAIT`.
const FETCH_INTERVAL: Duration = Duration::from_secs(10);

/// Message `i`'s payload: its number, then filler to `size` bytes.
fn payload(i: usize, size: usize) -> Vec<u8> {
    let mut p = format!("message {i}:").into_bytes();
    p.resize(size, b'0' + (i % 10) as u8);
    p
}

#[tokio::test]
async fn a_consumer_drains_a_queue_of_big_payloads_with_nothing_lost() {
    let (_server, _client, q) = start_queue("big", FETCH_INTERVAL, |b| b.concurrency(4)).await;
    // 20 of 600 KiB (one claim each: two pass the budget) and 4 of the
    // largest payload allowed, 1 MiB.
    let sizes: Vec<usize> = (0..24).map(|i| if i < 20 { 600 * 1024 } else { 1 << 20 }).collect();
    let msgs = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| NewMessage::new(payload(i, size)).id(format!("m{i}")));
    for result in q.send_batch(msgs).await.unwrap() {
        result.unwrap();
    }
    let log = Log::default();
    let consumer = q.start_consume(acking(&log)).await.unwrap();
    assert!(
        wait_until(WAIT, || log.len() >= sizes.len()).await,
        "delivered {} of {} within {WAIT:?}",
        log.len(),
        sizes.len()
    );
    let left = wait_stats(&q, WAIT, Counts::default()).await;
    consumer.shutdown().await.unwrap();
    assert_eq!(left, Counts::default(), "every message acked, none dead");
    let counts = log.counts();
    for (i, &size) in sizes.iter().enumerate() {
        let id = MessageId::from(format!("m{i}"));
        assert_eq!(counts.get(&id), Some(&1), "{id} delivered once");
        let got = log.snapshot().into_iter().find(|d| d.0 == id).unwrap();
        assert!(got.3 == payload(i, size), "{id}: payload not whole");
    }
}
