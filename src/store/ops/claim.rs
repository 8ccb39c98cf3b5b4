//! `claim`: leases ready and retried messages to a consumer
//! (`lua/claim.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{array, count, ms, unexpected, Op};
use crate::message::Receipt;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::store::stored::{decode_stored, FORMAT_VERSION};
use crate::{Error, Message, MessageId};

/// Most bytes of stored values one claim call reads and returns (a message
/// larger than this is leased alone): reading a value into Lua costs Redis
/// about 2 ns a byte (it hashes every byte of a new Lua string), so a call
/// stays within a few ms however big the payloads (docs/performance.md).
pub(crate) const CLAIM_BYTES: u64 = 1 << 20;

/// One claim request of a consumer: leases up to `limit` messages (and
/// [`CLAIM_BYTES`] of them), retry list first.
pub(crate) struct Claim<'a> {
    /// The consumer's receipt key (`Keys::claim`), which makes a repeated
    /// request replay what the first leased.
    pub receipt: &'a str,
    /// 0 leases nothing: it deletes the receipt (a stopping consumer).
    pub limit: usize,
    /// How long each lease lasts.
    pub max_consume_duration: Duration,
    /// The request's number: new for each request of the consumer, the
    /// same when it repeats one that failed.
    pub seq: u64,
    /// How long a message buried as expired is kept.
    pub dead_letter_retention: Duration,
    /// Most messages a ring member gets while several are due (0: no
    /// cap), so the claim that serves a group just come due stays short.
    pub group_share: usize,
}

/// What one claim leased.
#[derive(Debug)]
pub(crate) struct Claimed {
    /// Ids taken off the lists, skipped ones included.
    pub popped: u64,
    /// Messages buried as expired instead (deadline passed, or payload gone).
    pub expired: Vec<MessageId>,
    /// The lease of every delivery: microseconds of Redis time, fencing ack and nack.
    pub lease: i64,
    /// How much of the lease was left when the script ran.
    pub left: Duration,
    /// The queue is paused: nothing new was leased.
    pub paused: bool,
    /// A limit of the queue held the request back: it leased all the limit
    /// allowed, fewer than asked.
    pub held: Option<Held>,
    /// How long until the earliest group held out of the ring (by its
    /// rate, or an ordered group waiting out a failed message's delay) may
    /// start again; `None` when no group waits. A group held by its
    /// concurrency needs no timer: the script that frees its slot
    /// publishes a wake-up.
    pub group_wait: Option<Duration>,
    pub deliveries: Vec<Delivery>,
}

/// Which limit held a claim back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// The global concurrency limit: it opens when a processing message
    /// finishes, anywhere.
    Concurrency,
    /// The rate limit, which allows more after `wait`.
    Rate { wait: Duration },
    /// Cut short: by the call's byte budget ([`CLAIM_BYTES`]), the most
    /// groups one call serves (GROUP_TURNS and GROUP_CLAIM in
    /// lua/include/claim_groups.lua, or the group share), or a list whose
    /// popped entries were skipped while it may hold more ahead of the next
    /// list's. More may be ready now.
    Cut,
}

/// One leased message, as the script returned it.
#[derive(Debug)]
pub(crate) struct Delivery {
    /// `None` when the id is not text (written by something else).
    pub id: Option<MessageId>,
    /// The stored value, header included.
    pub value: Vec<u8>,
    /// Which delivery this is, 1 for the first.
    pub attempt: u32,
    /// When this delivery was due, ms of Redis time, from the attempt record
    /// (a retry's or a requeue's); 0: the send's, in the value.
    pub due_ms: u64,
    /// Deliveries the handler deferred without counting before this one.
    pub deferrals: u32,
}

impl Delivery {
    /// The message a handler gets, delivered under `receipt` (this
    /// delivery's); the receipt back when the value is not one this crate
    /// stores.
    pub(crate) fn message(&self, receipt: Receipt) -> Result<Message, Receipt> {
        let Some(stored) = decode_stored(&self.value) else {
            return Err(receipt);
        };
        // Every value the send script writes has them.
        let Some(times) = stored.times else {
            return Err(receipt);
        };
        Ok(Message {
            receipt,
            payload: stored.payload.to_vec(),
            retry_count: stored.retry_count,
            backoff: stored.backoff,
            priority: stored.priority,
            group: stored.group,
            headers: stored.headers,
            due_at_ms: if self.due_ms > 0 { self.due_ms } else { times.due_at_ms },
            deferrals: self.deferrals,
            times,
            scribe: Default::default(),
            abort: Default::default(),
        })
    }
}

impl Op for Claim<'_> {
    type Reply = Claimed;
    const KEYS: &'static [&'static str] = &[
        "ready",
        "retry",
        "processing",
        "attempts",
        "pending",
        "dead",
        "receipt",
        "totals",
    ];

    fn script() -> &'static LuaScript {
        &scripts::CLAIM
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.ready.clone(),
            k.retry.clone(),
            k.processing.clone(),
            k.attempts.clone(),
            k.pending.clone(),
            k.dead.clone(),
            self.receipt.to_string(),
            k.totals.clone(),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        vec![
            k.msg_prefix.as_str().into(),
            count(self.limit as u64),
            ms(self.max_consume_duration),
            count(self.seq),
            ms(self.dead_letter_retention),
            k.prio.as_str().into(),
            count(FORMAT_VERSION.into()),
            count(CLAIM_BYTES),
            k.group_prefix.as_str().into(),
            k.marker_prefix.as_str().into(),
            count(self.group_share as u64),
            k.wake.as_str().into(),
        ]
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let reply = array::<Self>(v)?;
        let bad = |detail: &str| unexpected::<Self>(detail);
        let (head, rest) = reply.split_at_checked(8).ok_or_else(|| bad("short reply"))?;
        let [popped, expired, lease, left_ms, paused, held, wait_ms, group_ms] = [
            &head[0], &head[1], &head[2], &head[3], &head[4], &head[5], &head[6], &head[7],
        ]
        .map(|v| v.as_i64().unwrap_or(-2));
        let expired = usize::try_from(expired).map_err(|_| bad("malformed header"))?;
        let (expired, rest) = rest.split_at_checked(expired).ok_or_else(|| bad("short reply"))?;
        let (Ok(popped), Ok(left_ms)) = (u64::try_from(popped), u64::try_from(left_ms)) else {
            return Err(bad("malformed header"));
        };
        let held = match (held, u64::try_from(wait_ms)) {
            (0, Ok(_)) => None,
            (1, Ok(_)) => Some(Held::Concurrency),
            (2, Ok(wait)) => Some(Held::Rate {
                wait: Duration::from_millis(wait),
            }),
            (3, Ok(_)) => Some(Held::Cut),
            _ => return Err(bad("malformed header")),
        };
        if rest.len() % 5 != 0 {
            return Err(bad("malformed header"));
        }
        let deliveries = rest.chunks_exact(5).map(|t| {
            // Id and value are read leniently: the caller buries an
            // unreadable delivery alone, its batch mates being leased already.
            let [attempt, due_ms, deferrals] =
                [&t[2], &t[3], &t[4]].map(|v| v.as_u64().ok_or_else(|| bad("malformed delivery")));
            Ok(Delivery {
                id: t[0].as_str().map(|id| MessageId::from(id.into_owned())),
                value: t[1].as_bytes().map(<[u8]>::to_vec).unwrap_or_default(),
                attempt: u32::try_from(attempt?).unwrap_or(u32::MAX),
                due_ms: due_ms?,
                deferrals: u32::try_from(deferrals?).unwrap_or(u32::MAX),
            })
        });
        Ok(Claimed {
            popped,
            // Never fails: the ids are buried already.
            expired: expired
                .iter()
                .map(|id| MessageId::from(id.as_string().unwrap_or_else(|| format!("{id:?}"))))
                .collect(),
            lease,
            left: Duration::from_millis(left_ms),
            paused: paused == 1,
            held,
            group_wait: match group_ms {
                -1 => None,
                ms => Some(Duration::from_millis(
                    u64::try_from(ms).map_err(|_| bad("malformed header"))?,
                )),
            },
            deliveries: deliveries.collect::<Result<_, Error>>()?,
        })
    }
}
