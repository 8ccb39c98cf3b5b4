//! `ack`: finishes deliveries whose lease is still current (`lua/ack.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::note::{Noted, Notes};
use super::{array, ints, ms, numbered, unexpected, Op};
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Acks a batch of deliveries.
pub(crate) struct Ack<'a> {
    /// Each delivery's id, lease and what it leaves behind.
    pub leases: Vec<(&'a str, i64, Keep<'a>)>,
    /// How long results (and progress and logs) are kept; zero keeps none.
    pub result_retention: Duration,
    /// Running deliveries' notes, written first: those of deliveries
    /// acked here get the result retention at once.
    pub notes: Notes<'a>,
}

/// What one ack call did.
#[derive(Debug)]
pub(crate) struct Acked {
    /// One outcome per delivery, in order.
    pub acks: Vec<AckOutcome>,
    /// One outcome per note, in order.
    pub notes: Vec<Noted>,
    /// The outbox entries each [`AckOutcome::AckedChild`] recorded, in
    /// order: the delivery's index, then its entry as stored.
    pub recorded: Vec<(usize, String)>,
}

/// What an acked delivery leaves behind.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Keep<'a> {
    /// The handler's result.
    pub result: Option<&'a [u8]>,
    /// The delivery wrote progress or log lines, which now get the result's retention.
    pub noted: bool,
}

impl<'a> Ack<'a> {
    /// Acks of deliveries that leave nothing behind.
    #[cfg(test)]
    pub(crate) fn plain(pairs: &[(&'a str, i64)]) -> Self {
        Ack {
            leases: pairs.iter().map(|&(id, lease)| (id, lease, Keep::default())).collect(),
            result_retention: Duration::from_secs(60),
            notes: Notes::none(),
        }
    }
}

impl Keep<'_> {
    /// The script's outcome argument: a flag, then the result bytes.
    fn arg(&self) -> Value {
        let flag: &[u8] = match (self.result.is_some(), self.noted) {
            (false, false) => return "".into(),
            (true, false) => b"r",
            (false, true) => b"n",
            (true, true) => b"b",
        };
        let result = self.result.unwrap_or_default();
        let mut arg = Vec::with_capacity(1 + result.len());
        arg.extend_from_slice(flag);
        arg.extend_from_slice(result);
        fred::bytes::Bytes::from(arg).into()
    }
}

numbered! {
    /// What the script did with one delivery.
    pub(crate) enum AckOutcome {
        /// The lease ran out: the message is or will be delivered again.
        LeaseLost = 0,
        Acked = 1,
        /// Acked, and its completion recorded for a parent in another
        /// slot: the relay has work (docs/workflows.md). Those of parents
        /// in its own slot the ack applied itself.
        AckedChild = 3,
        /// Nothing left to ack: finished already, by an earlier run of this
        /// call whose reply was lost, or by the ack of a redelivery after
        /// this delivery's lease ran out (the consumer tells them apart by
        /// whether the lease's deadline has passed).
        Finished = 2,
        /// The message was aborted while its handler ran: it ended as
        /// aborted, whatever the handler returned (lua/include/abort.lua).
        Aborted = 4,
    }
}

impl Op for Ack<'_> {
    type Reply = Acked;
    const KEYS: &'static [&'static str] = &["processing", "attempts", "totals", "waiting", "pending", "dead"];

    fn script() -> &'static LuaScript {
        &scripts::ACK
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        vec![
            k.processing.clone(),
            k.attempts.clone(),
            k.totals.clone(),
            k.flow_waiting.clone(),
            k.pending.clone(),
            k.dead.clone(),
        ]
    }

    fn args(&self, k: &Keys) -> Vec<Value> {
        let notes = &self.notes;
        let mut args: Vec<Value> = Vec::with_capacity(13 + 4 * notes.notes.len() + 3 * self.leases.len());
        for prefix in [
            &k.msg_prefix,
            &k.group_prefix,
            &k.marker_prefix,
            &k.result_prefix,
            &k.progress_prefix,
            &k.log_prefix,
            &k.waiters,
            &k.done,
        ] {
            args.push(prefix.as_str().into());
        }
        args.push(ms(self.result_retention));
        args.push(k.wake.as_str().into());
        notes.push_settings(&mut args);
        args.push(i64::try_from(notes.notes.len()).unwrap_or(i64::MAX).into());
        notes.push_notes(&mut args);
        for (id, lease, keep) in &self.leases {
            args.push((*id).into());
            args.push((*lease).into());
            args.push(keep.arg());
        }
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        let (acks, notes) = (self.leases.len(), self.notes.notes.len());
        let mut values = array::<Self>(v)?;
        if values.len() < acks + notes {
            return Err(unexpected::<Self>(format!(
                "{values:?} for {acks} acks and {notes} notes"
            )));
        }
        let lists = values.split_off(acks + notes);
        let outcomes = ints::<Self>(Value::Array(values))?;
        let bad = |n: i64| unexpected::<Self>(format!("outcome {n}"));
        let acks: Vec<AckOutcome> = outcomes[..acks]
            .iter()
            .map(|&n| AckOutcome::from_number(n).ok_or_else(|| bad(n)))
            .collect::<Result<_, _>>()?;
        let children = acks.iter().enumerate().filter(|(_, a)| **a == AckOutcome::AckedChild);
        let mut lists = lists.into_iter();
        let mut recorded = Vec::new();
        for (i, _) in children {
            let list = lists.next().ok_or_else(|| unexpected::<Self>("entries missing"))?;
            for entry in array::<Self>(list)? {
                let entry = entry
                    .into_string()
                    .ok_or_else(|| unexpected::<Self>("an entry is not a string"))?;
                recorded.push((i, entry));
            }
        }
        if lists.next().is_some() {
            return Err(unexpected::<Self>("more entry lists than acked children"));
        }
        Ok(Acked {
            acks,
            notes: outcomes[self.leases.len()..]
                .iter()
                .map(|&n| Noted::from_number(n).ok_or_else(|| bad(n)))
                .collect::<Result<_, _>>()?,
            recorded,
        })
    }
}
