//! `note`: running deliveries' progress and log lines, each fenced by its
//! delivery's lease (`lua/note.lua`).

use std::time::Duration;

use fred::prelude::Value;

use super::{each, ms, numbered, Op};
use crate::scribe::NoteKind;
use crate::store::keys::Keys;
use crate::store::scripts::{self, LuaScript};
use crate::Error;

/// Writes a batch of notes, of one or many deliveries.
pub(crate) struct Notes<'a> {
    pub notes: Vec<Note<'a>>,
    /// Log lines kept.
    pub max_lines: usize,
    /// TTL of the progress and log keys written.
    pub ttl: Duration,
}

/// One delivery's progress or log line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note<'a> {
    pub id: &'a str,
    /// The delivery's current lease.
    pub lease: i64,
    pub kind: NoteKind,
    /// The progress as JSON text, or the line.
    pub text: &'a str,
}

numbered! {
    /// What the script did with one note.
    pub(crate) enum Noted {
        /// The lease was not the current one: nothing written.
        LeaseLost = 0,
        Written = 1,
        /// The message's log key holds another type: nothing written.
        WrongType = 2,
    }
}

impl Notes<'_> {
    /// No notes.
    pub(crate) fn none() -> Self {
        Notes {
            notes: Vec::new(),
            max_lines: 1,
            ttl: Duration::from_millis(1),
        }
    }

    /// The arguments before the notes, as note.lua and ack.lua take
    /// them: the log lines kept and the TTL.
    pub(super) fn push_settings(&self, args: &mut Vec<Value>) {
        args.push(i64::try_from(self.max_lines).unwrap_or(i64::MAX).into());
        args.push(ms(self.ttl));
    }

    /// Four arguments per note: id, lease, kind, text.
    pub(super) fn push_notes(&self, args: &mut Vec<Value>) {
        for n in &self.notes {
            args.push(n.id.into());
            args.push(n.lease.into());
            args.push(
                match n.kind {
                    NoteKind::Progress => "p",
                    NoteKind::Log => "l",
                }
                .into(),
            );
            args.push(n.text.into());
        }
    }
}

impl Op for Notes<'_> {
    /// One outcome per note, in order.
    type Reply = Vec<Noted>;
    const KEYS: &'static [&'static str] = &["processing", "note.."];

    fn script() -> &'static LuaScript {
        &scripts::NOTE
    }

    fn keys(&self, k: &Keys) -> Vec<String> {
        let mut keys = Vec::with_capacity(1 + self.notes.len());
        keys.push(k.processing.clone());
        keys.extend(self.notes.iter().map(|n| match n.kind {
            NoteKind::Progress => k.progress(n.id),
            NoteKind::Log => k.log(n.id),
        }));
        keys
    }

    fn args(&self, _: &Keys) -> Vec<Value> {
        let mut args: Vec<Value> = Vec::with_capacity(2 + 4 * self.notes.len());
        self.push_settings(&mut args);
        self.push_notes(&mut args);
        args
    }

    fn reply(&self, v: Value) -> Result<Self::Reply, Error> {
        each::<Self, _>(v, self.notes.len(), "notes", Noted::from_number)
    }
}
