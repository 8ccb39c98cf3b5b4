//! Producers of the failover tests (`tests/sentinel.rs`,
//! `tests/cluster_failover.rs`): each sends unique ids one after another
//! and repeats a failed send with the same id, which is safe, until it is
//! acknowledged or the run ends; [`Sent`] is what they saw. A [`Lane`] is
//! one queue of such a run: its consumer, its delivery log, its producers.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayqueue::fred::clients::Client;
use delayqueue::{Consumer, DelayQueue, DelayQueueBuilder, Durability, Error, MessageId, NewMessage};
use tokio::task::JoinHandle;

use delayqueue_test_support::{wait_for, wait_until, WAIT};

use super::{acking, Log};

/// Producer tasks per queue.
pub const PRODUCERS: usize = 2;

/// One queue of a failover run: its producers and its consumer.
pub struct Lane {
    pub name: &'static str,
    pub queue: DelayQueue,
    pub log: Log,
    pub consumer: Consumer,
    pub producers: Vec<JoinHandle<Sent>>,
}

impl Lane {
    /// The queue `name` on `client` as every failover run sets it up
    /// (concurrency 8, a 100 ms sweep, leases of 2 s), changed by `more`,
    /// with a consumer that records and acknowledges every delivery.
    pub async fn start(
        name: &'static str,
        client: Client,
        durability: Durability,
        more: impl FnOnce(DelayQueueBuilder) -> DelayQueueBuilder,
    ) -> Lane {
        let builder = DelayQueue::builder(name, client)
            .durability(durability)
            .concurrency(8)
            .fetch_interval(Duration::from_millis(100))
            .max_consume_duration(Duration::from_secs(2));
        let queue = more(builder).build().unwrap();
        let log = Log::default();
        let consumer = queue.start_consume(acking(&log)).await.unwrap();
        Lane {
            name,
            queue,
            log,
            consumer,
            producers: Vec::new(),
        }
    }

    /// Starts [`PRODUCERS`] producers, `<name><p>-<n>`, until `stop`.
    pub fn produce(&mut self, started: Instant, stop: &Arc<AtomicBool>) {
        for p in 0..PRODUCERS {
            let prefix = format!("{}{p}", self.name);
            self.producers
                .push(tokio::spawn(produce(self.queue.clone(), prefix, started, stop.clone())));
        }
    }

    /// Sends `n` messages `<name>-due-<i>` now, in one batch, due evenly
    /// from `from` to `to` after `started`: work that falls due during a
    /// failover whatever the producers are waiting on. Counted with what
    /// the producers sent.
    pub async fn schedule(&mut self, started: Instant, from: Duration, to: Duration, n: u32) {
        let step = (to - from) / n;
        let ids: Vec<MessageId> = (0..n)
            .map(|i| MessageId::from(format!("{}-due-{i}", self.name)))
            .collect();
        // Sent again, as the producers do, while it fails in a way a
        // repeat with the same ids mends (a durable send not confirmed yet).
        let deadline = Instant::now() + WAIT;
        let results = loop {
            let msgs = ids.iter().zip(0..).map(|(id, i)| {
                let due = (from + step * i).saturating_sub(started.elapsed());
                NewMessage::new(id.as_str()).id(id.as_str()).delay(due)
            });
            let late = Instant::now() > deadline;
            match self.queue.send_batch(msgs).await {
                Err(e) if e.is_retryable() && !late => continue,
                Err(e) => panic!("{}: the scheduled batch: {e}", self.name),
                Ok(results) => {
                    let again = |r: &Result<MessageId, Error>| matches!(r, Err(e) if e.is_retryable());
                    if !results.iter().any(again) || late {
                        break results;
                    }
                }
            }
        };
        let at = started.elapsed();
        let mut sent = Sent::default();
        for (id, result) in ids.into_iter().zip(results) {
            sent.attempted.insert(id.clone());
            match result {
                Ok(_) | Err(Error::Duplicate { .. }) => sent.acknowledged.push((id, at)),
                Err(e) => panic!("{}: scheduling {id}: {e}", self.name),
            }
        }
        self.producers.push(tokio::spawn(async move { sent }));
    }

    /// Waits for the producers, then until every acknowledged message is
    /// delivered or the queue is drained (lost messages are not coming),
    /// and checks that no id was delivered that was never sent. Returns
    /// what was sent and the acknowledged messages never delivered.
    pub async fn settle(&mut self) -> (Sent, Vec<(MessageId, Duration)>) {
        let sent = join(std::mem::take(&mut self.producers)).await;
        let acknowledged = sent.acknowledged_ids();
        wait_for(WAIT, || async {
            let ids = self.log.ids();
            acknowledged.iter().all(|id| ids.contains(*id)) || self.queue.counts().await.unwrap().live() == 0
        })
        .await;
        let ids = self.log.ids();
        let unsent: Vec<&MessageId> = ids.iter().filter(|id| !sent.attempted.contains(*id)).collect();
        assert!(unsent.is_empty(), "{}: delivered but never sent: {unsent:?}", self.name);
        let lost = sent
            .acknowledged
            .iter()
            .filter(|(id, _)| !ids.contains(id))
            .cloned()
            .collect();
        (sent, lost)
    }
}

/// Lets `lanes` run on for 1.5 s and until each delivered 20 more
/// messages (however slow the machine), then stops their producers.
pub async fn run_on(lanes: &[Lane], stop: &AtomicBool) {
    let marks: Vec<usize> = lanes.iter().map(|l| l.log.len()).collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    wait_until(WAIT, || lanes.iter().zip(&marks).all(|(l, m)| l.log.len() >= m + 20)).await;
    stop.store(true, Ordering::Relaxed);
}

/// What the producers of one queue saw.
#[derive(Default)]
pub struct Sent {
    /// Ids whose send returned `Ok` or `Duplicate`, with when, measured
    /// from the start of the run.
    pub acknowledged: Vec<(MessageId, Duration)>,
    /// Every id a send was made with, acknowledged or not.
    pub attempted: HashSet<MessageId>,
    /// Failed send calls by error (repeated with the same id).
    pub errors: HashMap<String, usize>,
    /// Ids given up on (still failing when the run ended): not acknowledged.
    pub abandoned: usize,
}

impl Sent {
    /// The ids whose send was acknowledged.
    pub fn acknowledged_ids(&self) -> HashSet<&MessageId> {
        self.acknowledged.iter().map(|(id, _)| id).collect()
    }
}

/// Sends `<prefix>-<n>` one after another until `stop`, each due within
/// 300 ms (half of them delayed by more than 150 ms); a failed send is
/// repeated with the same id (idempotent) until it returns `Ok` or
/// `Duplicate`, or the run ends.
pub async fn produce(q: DelayQueue, prefix: String, started: Instant, stop: Arc<AtomicBool>) -> Sent {
    let mut sent = Sent::default();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let id = format!("{prefix}-{n}");
        sent.attempted.insert(MessageId::from(id.as_str()));
        loop {
            match q
                .send(id.as_str())
                .delay(Duration::from_millis(n % 300))
                .id(id.as_str())
                .await
            {
                Ok(_) | Err(Error::Duplicate { .. }) => {
                    sent.acknowledged
                        .push((MessageId::from(id.as_str()), started.elapsed()));
                    break;
                }
                Err(e) => {
                    let kind = match &e {
                        Error::NotDurable { .. } => "NotDurable".to_string(),
                        Error::Unconfirmed { .. } => "Unconfirmed".to_string(),
                        other => other.to_string().chars().take(70).collect(),
                    };
                    *sent.errors.entry(kind).or_insert(0) += 1;
                    if stop.load(Ordering::Relaxed) {
                        sent.abandoned += 1;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    sent
}

/// Waits for every producer and adds up what they saw.
pub async fn join(producers: Vec<JoinHandle<Sent>>) -> Sent {
    let mut sent = Sent::default();
    for p in producers {
        let s = p.await.expect("a producer panicked");
        sent.acknowledged.extend(s.acknowledged);
        sent.attempted.extend(s.attempted);
        for (k, v) in s.errors {
            *sent.errors.entry(k).or_insert(0) += v;
        }
        sent.abandoned += s.abandoned;
    }
    sent
}

/// The longest gap between two of `times` that ends after `from`, and
/// when it ended: how soon a flow resumed after a fault at `from`.
pub fn longest_gap_after(mut times: Vec<Duration>, from: Duration) -> Option<(Duration, Duration)> {
    times.sort_unstable();
    times
        .windows(2)
        .filter(|w| w[1] > from)
        .map(|w| (w[1] - w[0], w[1]))
        .max()
}
