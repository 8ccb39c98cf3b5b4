//! Promotion: pending messages whose due time has come move to ready,
//! where a claim finds them.

use std::time::Duration;

use super::context::Context;
use super::settings::MAX_ROUNDS;
use crate::store::ops::promote::Promote;
use crate::store::Keys;
use crate::Error;

/// Moves due messages to ready, and groups whose wait is over back to the
/// ring; returns how many of both moved (a claim has work when any did)
/// and how long until the next is due. `room`: how many this consumer
/// claims next; what moves beyond it wakes the other consumers.
pub(crate) async fn promote(ctx: &Context, k: &Keys, room: usize) -> Result<(usize, Option<Duration>), Error> {
    let batch = ctx.settings.batch_size;
    let (mut total, mut wait) = (0, None);
    for _ in 0..MAX_ROUNDS {
        let room = room.saturating_sub(total);
        let reply = ctx.store(k).run(&Promote { limit: batch, room }).await?;
        for late in &reply.late {
            ctx.meters.lateness.record(late.as_secs_f64());
        }
        total += (reply.moved + reply.woken) as usize;
        wait = reply.next_due;
        // Over many groups a call moves fewer than asked (promote.lua's
        // budget); a wait of zero says more are due now.
        if reply.moved < batch as u64 && reply.next_due != Some(Duration::ZERO) {
            break;
        }
    }
    Ok((total, wait))
}
