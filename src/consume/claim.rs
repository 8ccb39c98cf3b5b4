//! Claims: how many messages a shard's loop may lease now
//! ([`claim_capacity`]), and the claim itself, which leases them and hands
//! each to a delivery task of its own.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::acker::ACK_SLACK;
use super::delivery;
use super::outcome::Ended;
use super::settings::Settings;
use super::settle;
use super::state::Shared;
use crate::events::{self, Event};
use crate::message::Receipt;
use crate::store::ops::claim::{Claim, Delivery, Held};
use crate::{Error, MessageId};

/// Most ids one claim call leases, whatever `batch_size`: a claim does
/// several calls per id, and at 512 ids it ran up to ~8 ms with 1,000,000
/// keys in Redis (docs/performance.md). More are claimed in further calls.
const MAX_CLAIM: usize = 256;

/// How busy a consumer is, as one loop sees it before a claim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Shards of the loop's queue.
    pub shards: usize,
    /// The queue's part of the limit: its weight over `of_weight`.
    pub weight: u64,
    pub of_weight: u64,
    /// Messages claimed and not finished, over all queues and shards.
    pub in_flight: usize,
    /// Of those, the queue's.
    pub queue_in_flight: usize,
    /// Of those, this shard's.
    pub shard_in_flight: usize,
    /// This shard's finished deliveries whose ack is not done yet (not
    /// sent, or its completion not yet relayed).
    pub acking: usize,
    /// How many of those may wait before claims shrink ([`AckLine`](super::acker::AckLine)).
    pub ack_slack: usize,
    /// Recent handler run time in microseconds; 0 before the first run ends.
    pub avg_handler_us: u64,
    /// Whether the consumer's handlers stall (`Pool::stalled`).
    pub stalled: bool,
}

/// A consumer of one queue: all of the limit is its.
impl Default for Load {
    fn default() -> Self {
        Load {
            shards: 1,
            weight: 1,
            of_weight: 1,
            in_flight: 0,
            queue_in_flight: 0,
            shard_in_flight: 0,
            acking: 0,
            ack_slack: ACK_SLACK,
            avg_handler_us: 0,
            stalled: false,
        }
    }
}

impl Load {
    /// The load of `shared`'s consumer now.
    pub(crate) fn of(shared: &Shared) -> Load {
        let pool = &shared.pool;
        let (weight, of_weight) = pool.part(shared.lane);
        Load {
            shards: shared.ctx.shards.len(),
            weight,
            of_weight,
            in_flight: pool.in_flight.load(Ordering::Acquire),
            queue_in_flight: pool.lanes[shared.lane].in_flight.load(Ordering::Acquire),
            shard_in_flight: shared.in_flight.load(Ordering::Acquire),
            acking: shared.acking.waiting(),
            ack_slack: shared.acking.slack(),
            avg_handler_us: pool.avg_handler_us(),
            stalled: pool.stalled(),
        }
    }
}

/// How many messages to claim now: free slots, but no more than the
/// handlers can start before the max consume duration, judged by how long
/// they have taken so far, and none ahead of handlers that stall. Of that
/// limit a queue of several takes its
/// part (by weight among the queues with work waiting, or by order), and
/// a shard of several at most its share of the queue's (but enough to
/// keep every handler busy), so a queue or shard whose claims happen to
/// come first cannot crowd out the others.
pub(crate) fn claim_capacity(settings: &Settings, load: &Load) -> usize {
    // Stalled handlers start nothing soon: no claims ahead of them, so
    // what they would hold waits for a consumer with a free handler.
    let startable = match (load.stalled, load.avg_handler_us) {
        (true, _) | (_, 0) => settings.concurrency,
        (false, avg) => (settings.max_consume_duration.as_micros() as u64 / avg)
            .saturating_mul(settings.concurrency as u64) as usize,
    };
    let limit = startable.max(settings.concurrency).min(settings.fetch_limit);
    let part = ((limit as u64).saturating_mul(load.weight)).div_ceil(load.of_weight.max(1)) as usize;
    let queue = part.min(limit).saturating_sub(load.queue_in_flight);
    let share = part.div_ceil(load.shards).max(settings.concurrency.min(part));
    let mine = share.saturating_sub(load.shard_in_flight);
    // Acks that fall behind (Redis slower than the handlers) hold back
    // claims, or their leases would run out while they wait to be sent,
    // and a parent would wait behind its children's long line.
    let lagging = load.acking.saturating_sub(load.ack_slack);
    // While relayed flow children take too long to be done acking (the
    // slack cut short, `AckLine`), what is claimed and not done acking
    // stays within half the limit and the slack: handlers that outrun
    // Redis would otherwise turn a whole claim into the line ahead of a
    // parent's last child.
    let line = match load.ack_slack < ACK_SLACK {
        true => (limit / 2 + load.ack_slack).saturating_sub(load.in_flight + load.acking),
        false => usize::MAX,
    };
    limit
        .saturating_sub(load.in_flight + lagging)
        .min(line)
        .min(queue)
        .min(mine)
        .min(settings.batch_size)
        .min(MAX_CLAIM)
}

/// Claims up to `want` messages, counts them in flight and has a task
/// start a delivery task for each (after the previous claim's); returns
/// how many ids were popped, the queue limit that held the claim back, if
/// one did, and how long until the earliest waiting group may start again.
pub(crate) async fn claim(shared: &Arc<Shared>, want: usize) -> Result<(usize, Option<Held>, Option<Duration>), Error> {
    let ctx = &shared.ctx;
    let claim = Claim {
        receipt: &shared.claim_key,
        limit: want,
        max_consume_duration: ctx.settings.max_consume_duration,
        seq: shared.claims.load(Ordering::Relaxed),
        dead_letter_retention: ctx.settings.dead_letter_retention,
        group_share: ctx.settings.group_share,
    };
    let sent = Instant::now();
    let reply = shared.store().run(&claim).await;
    // The request is answered once Redis ran it, even should its reply be
    // unreadable; one that failed keeps its sequence number, so repeating
    // it replays whatever it leased if it did reach Redis.
    if matches!(reply, Ok(_) | Err(Error::UnexpectedReply { .. })) {
        shared.claims.fetch_add(1, Ordering::Relaxed);
    }
    let reply = reply?;
    let (popped, lease, held) = (reply.popped, reply.lease, reply.held);
    ctx.meters.paused.set(f64::from(u8::from(reply.paused)));
    if shared.paused.swap(reply.paused, Ordering::Relaxed) != reply.paused {
        // Claims go on while paused (one per fetch_interval or wake-up), so
        // the consumer sees the resume at once.
        if reply.paused {
            tracing::info!(queue = %ctx.name, shard = shared.shard, "queue is paused; leasing nothing until it is resumed");
        } else {
            tracing::info!(queue = %ctx.name, shard = shared.shard, "queue resumed; leasing again");
        }
    }
    // Redis ran the script after `sent`, so by this host's clock the lease
    // ends no earlier than this.
    let deadline = sent + reply.left;
    for id in reply.expired {
        tracing::warn!(
            queue = %ctx.name, %id,
            "message expired (its expire_after passed, or its payload was gone) before delivery; moved to the dead letters"
        );
        ctx.meters.expired.increment(1);
        events::emit(&ctx.events, || Event::Expired { id });
    }
    let deliveries = reply.deliveries;
    if !deliveries.is_empty() {
        delivery::count_in(shared, deliveries.iter().filter(|d| d.id.is_some()).count());
        // Handing hundreds of deliveries to their tasks takes a while: it
        // runs beside the next claim's round trip, after the previous
        // claim's handing, so that each group's line keeps claim order.
        let mut handing = shared.handing.lock().unwrap_or_else(PoisonError::into_inner);
        let (before, shared) = (handing.take(), shared.clone());
        *handing = Some(tokio::spawn(async move {
            if let Some(before) = before {
                let _ = before.await;
            }
            hand(&shared, deliveries, lease, deadline);
        }));
    }
    Ok((popped as usize, held, reply.group_wait))
}

/// Starts a delivery task for each of a claim's `deliveries`, counted in
/// flight already, each in line for a handler slot in claim order.
fn hand(shared: &Arc<Shared>, deliveries: Vec<Delivery>, lease: i64, deadline: Instant) {
    let ctx = &shared.ctx;
    // One unreadable message must not cost its batch mates their
    // delivery: they are leased already, and nothing would replay them.
    let unreadable = |id: Option<&MessageId>, delivery: &Delivery| {
        // The value's length only: it may hold a payload, and payloads are never logged.
        tracing::error!(
            queue = %ctx.name, ?id, value_bytes = delivery.value.len(), attempt = delivery.attempt,
            "unreadable message (written by something else?); moving it to the dead letters"
        );
    };
    for mut delivery in deliveries {
        let Some(id) = delivery.id.take() else {
            // An id that is not text cannot be named in a nack.
            unreadable(None, &delivery);
            continue;
        };
        let receipt = Receipt {
            id,
            attempt: delivery.attempt,
            lease,
            deadline,
        };
        match delivery.message(receipt) {
            Ok(msg) => {
                // In line for a handler slot now, in claim order within its
                // group: the tasks run in no promised order on a multi-thread runtime.
                let slot = shared.pool.slot(shared.lane, msg.group());
                tokio::spawn(delivery::run(shared.clone(), msg, slot));
            }
            Err(receipt) => {
                unreadable(Some(&receipt.id), &delivery);
                let (shared, ended) = (shared.clone(), Ended::unreadable(receipt));
                tokio::spawn(async move {
                    settle::settle(&shared, ended).await;
                    delivery::count_out(&shared);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::settings;

    /// An idle consumer of `shards` shards whose handlers are fast, so
    /// `fetch_limit`, not the lease, bounds claims.
    fn idle(shards: usize) -> Load {
        Load {
            shards,
            avg_handler_us: 1,
            ..Load::default()
        }
    }

    #[test]
    fn a_shard_claims_its_share_of_what_is_free() {
        let s = settings::for_tests(8, 256);
        let a = idle(4);
        assert_eq!(claim_capacity(&s, &a), 64, "a quarter of fetch_limit");
        let a = Load {
            shard_in_flight: 60,
            in_flight: 250,
            ..a
        };
        assert_eq!(claim_capacity(&s, &a), 4, "its share, less what it holds");
        let b = Load {
            in_flight: 250,
            ..idle(4)
        };
        assert_eq!(claim_capacity(&s, &b), 6, "what is left of fetch_limit");
        let b = Load { in_flight: 200, ..b };
        assert_eq!(claim_capacity(&s, &b), 56);
        // Acks waiting beyond the slack hold claims back one for one.
        let lagging = Load {
            acking: ACK_SLACK + 3,
            ..b
        };
        assert_eq!(claim_capacity(&s, &lagging), 53);
        let at_slack = Load { acking: ACK_SLACK, ..b };
        assert_eq!(claim_capacity(&s, &at_slack), 56);
        // A slack cut short (relayed children late) also bounds what is
        // claimed and not done acking: half of 256, plus the slack.
        let cut = Load {
            acking: 40,
            ack_slack: 32,
            ..idle(1)
        };
        assert_eq!(claim_capacity(&s, &cut), 128 + 32 - 40);
        let cut = Load {
            in_flight: 100,
            shard_in_flight: 100,
            queue_in_flight: 100,
            ..cut
        };
        assert_eq!(claim_capacity(&s, &cut), 20);
    }

    #[test]
    fn a_queue_of_several_claims_its_weights_part_less_what_it_holds() {
        let s = settings::for_tests(10, 100);
        let part = |weight, of_weight| Load {
            weight,
            of_weight,
            ..idle(1)
        };
        assert_eq!(claim_capacity(&s, &part(6, 10)), 60);
        assert_eq!(claim_capacity(&s, &part(3, 10)), 30);
        assert_eq!(claim_capacity(&s, &part(1, 10)), 10, "at least one each, rounded up");
        assert_eq!(claim_capacity(&s, &part(1, 1)), 100, "alone with work: all of it");
        assert_eq!(claim_capacity(&s, &part(0, 1)), 0, "strict order, another's turn");
        let holding = Load {
            queue_in_flight: 55,
            in_flight: 90,
            ..part(6, 10)
        };
        assert_eq!(claim_capacity(&s, &holding), 5, "its part less what it holds");
        let others_hold = Load {
            in_flight: 95,
            ..part(6, 10)
        };
        assert_eq!(claim_capacity(&s, &others_hold), 5, "no more than the pool has left");
    }

    #[test]
    fn stalled_handlers_claim_no_more_than_their_free_slots() {
        let s = settings::for_tests(8, 256);
        assert_eq!(claim_capacity(&s, &idle(1)), 256, "ahead of fast handlers");
        let stalled = Load {
            stalled: true,
            in_flight: 8,
            queue_in_flight: 8,
            shard_in_flight: 8,
            ..idle(1)
        };
        assert_eq!(claim_capacity(&s, &stalled), 0, "none ahead of stalled handlers");
        let another_queue_stalls = Load {
            stalled: true,
            in_flight: 6,
            ..idle(1)
        };
        assert_eq!(
            claim_capacity(&s, &another_queue_stalls),
            2,
            "only what free slots start"
        );
    }

    #[test]
    fn one_claim_leases_at_most_max_claim_ids() {
        assert_eq!(claim_capacity(&settings::for_tests(8, 1000), &idle(1)), MAX_CLAIM);
        let small_batches = Settings {
            batch_size: 10,
            ..settings::for_tests(8, 1000)
        };
        assert_eq!(claim_capacity(&small_batches, &idle(1)), 10);
    }

    #[test]
    fn claims_are_no_more_than_the_handlers_start_within_a_lease() {
        // A 5 s lease, 8 handlers.
        let s = settings::for_tests(8, 256);
        let after = |avg_handler_us| Load {
            avg_handler_us,
            ..idle(1)
        };
        assert_eq!(claim_capacity(&s, &after(0)), 8, "no handler has ended yet: one each");
        assert_eq!(claim_capacity(&s, &after(1_000_000)), 40, "5 rounds of 1 s");
        assert_eq!(
            claim_capacity(&s, &after(60_000_000)),
            8,
            "slower than a lease: still one each"
        );
        // Sharded, each shard may still keep every handler busy.
        assert_eq!(claim_capacity(&s, &Load { shards: 4, ..after(0) }), 8);
    }
}
