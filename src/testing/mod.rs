//! A testing kit for code that uses `delayqueue` (feature `testing`;
//! docs/testing.md):
//!
//! - [`TestMessage`]: run a [`Handler`](crate::Handler) on a crafted
//!   message, without Redis, and see what it did ([`Handled`]: the
//!   [`Verdict`] the consumer would act on, progress, log lines, result);
//! - [`RedisServer`]: a throwaway `redis-server` for integration tests, on
//!   a free loopback port with its own temp dir, killed on drop;
//! - [`held`], [`make_due`] and [`drain`]: what a queue holds, every
//!   pending message due now, and what is due handled to the end.

mod handled;
mod queue_tools;
mod server;

pub use handled::{Handled, TestMessage, Verdict};
pub use queue_tools::{drain, held, make_due, Drained};
pub use server::RedisServer;
