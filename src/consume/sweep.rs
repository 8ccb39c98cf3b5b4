//! The sweep, once per `fetch_interval` and shard: deliveries whose lease
//! ran out go back to retry (or to the dead letters when they have no
//! deliveries left), and dead letters past their retention or beyond the
//! limit are deleted. A delivery aborted while it ran ends as aborted
//! instead (lua/include/abort.lua).

use super::acker;
use super::context::Context;
use super::settings::MAX_ROUNDS;
use crate::events::{self, Event};
use crate::store::ops::gc::Gc;
use crate::store::ops::timeout::Timeout;
use crate::store::Keys;
use crate::Error;

/// Takes back timed-out deliveries and deletes expired dead letters, a bounded number of batches.
pub(crate) async fn sweep(ctx: &Context, k: &Keys) -> Result<(), Error> {
    let settings = &ctx.settings;
    let batch = settings.batch_size;
    let timeout = Timeout {
        limit: batch,
        default_retry_count: settings.default_retry_count,
        dead_letter_retention: settings.dead_letter_retention,
    };
    for _ in 0..MAX_ROUNDS {
        let reply = ctx.store(k).run(&timeout).await?;
        let (timed_out, buried) = (reply.count, reply.dead);
        // Aborted while a consumer that is gone held them: they end so.
        for id in &reply.aborted {
            acker::aborted(ctx, id);
        }
        let dead = buried.len() as u64;
        if timed_out > 0 {
            // The buried ones get a line each below.
            if timed_out > dead {
                tracing::warn!(
                    queue = %ctx.name, count = timed_out - dead,
                    "deliveries exceeded max_consume_duration; redelivering"
                );
            }
            ctx.meters.timed_out.increment(timed_out);
            ctx.meters.retried.increment(timed_out - dead);
            ctx.meters.dead.increment(dead);
            events::emit(&ctx.events, || Event::TimedOut { count: timed_out, dead });
        }
        for (id, attempt) in buried {
            tracing::warn!(
                queue = %ctx.name, %id, attempt, reason = "timeout",
                "delivery exceeded max_consume_duration and used up its deliveries; moved to the dead letters"
            );
            events::emit(&ctx.events, || Event::Dead {
                id,
                attempt,
                reason: "timeout".into(),
            });
        }
        if timed_out + (reply.aborted.len() as u64) < batch as u64 {
            break;
        }
    }
    let gc = Gc {
        limit: batch,
        dead_letter_retention: settings.dead_letter_retention,
        max_kept: settings.dead_limit,
        ids: Vec::new(),
    };
    for _ in 0..MAX_ROUNDS {
        let collected = ctx.store(k).run(&gc).await?;
        if collected > 0 {
            tracing::debug!(queue = %ctx.name, collected, "dead letters past their retention deleted");
        }
        if collected < batch as u64 {
            break;
        }
    }
    Ok(())
}
