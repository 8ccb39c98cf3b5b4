//! Sentinel failover: a primary, two replicas and three sentinels
//! (`tests/support/sentinel.rs`); producers and consumers on a client from
//! `delayqueue::connect`; the primary is SIGKILLed mid-run and a replica
//! takes over. Each run prints how soon sends resumed after the kill.
//!
//! Two queues run side by side through the same failover: `durable` sends
//! with `Durability::Replicas` (WAIT for one replica), `plain` with the
//! default (asynchronous replication). Every message whose send returned
//! `Ok` on `durable` must be delivered; for `plain` the test reports how
//! many were lost and does not assert a number. Two replicas, because after
//! the failover a `WAIT 1` needs a replica of the new primary: Sentinel
//! points the remaining one at it.

mod helpers;
use delayqueue_test_support as support;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::Durability;
use helpers::failover::{longest_gap_after, run_on, Lane};
use support::sentinel::SentinelSetup;
use support::WAIT;

/// Runs both queues, kills the primary after 1 s (when `cut_link_first`,
/// 300 ms after stopping the replicas and cutting their links), waits for the
/// failover, keeps sending for 1.5 s more, and then checks every
/// acknowledged message of both queues. Returns the lost ids per queue.
async fn failover_run(cut_link_first: bool) -> HashMap<&'static str, usize> {
    let mut setup = SentinelSetup::start(2).await;
    // A client per queue: WAIT is a blocking command, and fred holds every
    // other command of a client back while one blocks on it.
    let durable = Durability::Replicas {
        replicas: 1,
        timeout: Duration::from_millis(500),
    };
    // Clients as delayqueue::connect makes them: its reconnect policy
    // decides how soon sends resume after the promotion.
    let connect = || async { delayqueue::connect(&setup.url()).await.unwrap() };
    let mut lanes = vec![
        Lane::start("durable", connect().await, durable, |b| b).await,
        Lane::start("plain", connect().await, Durability::Memory, |b| b).await,
    ];
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    for lane in &mut lanes {
        lane.produce(started, &stop);
    }

    tokio::time::sleep(Duration::from_millis(1000)).await;
    if cut_link_first {
        // The replicas are stopped (they cannot reconnect) and the primary
        // drops their links: what it takes from now on exists only on it.
        setup.signal_replicas("STOP");
        let primary = setup.primary().unwrap();
        let cut = primary.raw_command(&["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(cut, "2", "replica links cut");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let killed_at = started.elapsed();
    let old = setup.kill_primary();
    if cut_link_first {
        setup.signal_replicas("CONT");
    }
    let new = setup.wait_failover(old, 2 * WAIT).await;
    let failover_took = started.elapsed() - killed_at;
    let replica_back = setup.wait_replicas_of(new, 1, WAIT).await;
    let resynced_after = started.elapsed() - killed_at;
    // Keep sending until both queues made progress on the new primary
    // (for at least 1.5 s), however slow the machine.
    run_on(&lanes, &stop).await;

    let mut lost_by_queue = HashMap::new();
    for mut lane in lanes {
        let (sent, lost) = lane.settle().await;
        let acknowledged = sent.acknowledged_ids();
        let log = &lane.log;
        let duplicates = log.counts().values().filter(|n| **n > 1).count();
        let before_kill = sent.acknowledged.iter().filter(|(_, at)| *at < killed_at).count();
        let first_after = sent
            .acknowledged
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| *at > killed_at)
            .min()
            .map(|at| at - killed_at);
        // The longest gap between two acknowledged sends that ends after
        // the kill, and when it ended: how soon sends resumed.
        let stall = longest_gap_after(sent.acknowledged.iter().map(|(_, at)| *at).collect(), killed_at);
        println!(
            "{}{}: {} acknowledged ({before_kill} before the kill), {} lost {:?}, {duplicates} delivered more than \
             once, {} deliveries; failed sends (repeated): {:?}, abandoned at the end: {}; primary killed {:?} into \
             the run, sentinels named the new primary {:?} later, a replica was back {:?} after the kill \
             ({replica_back}); first acknowledged send after the kill: {:?} later; longest stall of sends from \
             the kill on: {:?}, resumed {:?} after the kill",
            lane.name,
            if cut_link_first {
                " (replicas cut off 300 ms before the kill)"
            } else {
                ""
            },
            acknowledged.len(),
            lost.len(),
            lost.iter()
                .take(5)
                .map(|(id, at)| format!("{id} acked at {at:?}"))
                .collect::<Vec<_>>(),
            log.len(),
            sent.errors,
            sent.abandoned,
            killed_at,
            failover_took,
            resynced_after,
            first_after,
            stall.map(|(gap, _)| gap),
            stall.map(|(_, resumed)| resumed - killed_at),
        );
        assert!(
            !acknowledged.is_empty() && first_after.is_some(),
            "{}: no progress after the failover",
            lane.name
        );
        lost_by_queue.insert(lane.name, lost.len());
        lane.consumer.shutdown().await.unwrap();
        let report = lane.queue.check_integrity().await.unwrap();
        // Lost messages can leave pieces (e.g. a retries record): report only.
        if !report.is_clean() {
            println!("{}: {report}", lane.name);
        }
    }
    lost_by_queue
}

/// The primary dies mid-run; sentinels promote a replica; producers and
/// consumers follow it. Nothing acknowledged with `Durability::Replicas`
/// is lost; what plain asynchronous replication lost is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_loses_nothing_acknowledged_with_replicas_durability() {
    let lost = failover_run(false).await;
    assert_eq!(lost["durable"], 0, "acknowledged durable sends were lost");
}

/// As above, but the replicas are stopped and their links cut 300 ms
/// before the primary dies (a partition, then a crash): plain sends acknowledged
/// in that window exist only on the dead primary, while durable sends
/// wait, fail with `NotDurable`, are repeated on the new primary and are
/// not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_a_replication_blip_loses_plain_sends_but_not_durable_ones() {
    let lost = failover_run(true).await;
    assert_eq!(lost["durable"], 0, "acknowledged durable sends were lost");
}
