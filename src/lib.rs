//! # delayqueue
//!
//! A reliable delayed message queue on Redis, for tokio services: schedule
//! work for later ("cancel this order in 30 minutes"), and a consumer hands
//! each message to your [`Handler`] once it is due.
//!
//! **Guarantee: at-least-once.** A message whose send returned `Ok` is
//! handled successfully at least once, or becomes a dead letter after its
//! retries; a crashed worker, a failing or panicking handler, or a Redis
//! restart with persistence does not lose it. It is never dropped while
//! undelivered, however long no consumer runs: only an explicit
//! `expire_after` discards it, and every discard is counted
//! (`totals.expired`), emitted ([`Event::Expired`]), logged and kept as a
//! dead letter with reason `"expired"`. Every state change is one Lua
//! script, time comes from Redis's clock, and acks are fenced by a lease,
//! so a late ack or nack never deletes or duplicates a redelivered message.
//! See `docs/design.md` for the state machine and what can cause duplicates.
//!
//! A message is in one of five states ([`MessageState`]): pending (waiting
//! for its due time), ready (due, waiting for a consumer), processing (a
//! handler has it), retry (failed, waiting to be delivered again) and dead
//! (a dead letter).
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//! use delayqueue::{Counts, DelayQueue, Error, Handler, HandlerError, Message, MessageId};
//!
//! struct CloseOrder;
//! #[delayqueue::async_trait]
//! impl Handler for CloseOrder {
//!     async fn handle(&self, msg: Message) -> Result<(), HandlerError> {   // Ok = ack, Err = nack
//!         let _ = (msg.id(), msg.payload(), msg.attempt());                 // &MessageId, &[u8], u32 (1 = first delivery)
//!         let _ = (msg.due_at(), msg.sent_at());                            // SystemTime, by Redis's clock
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Error> {
//! let client = delayqueue::connect("redis://127.0.0.1:6379").await?;
//! let queue = DelayQueue::builder("orders", client.clone())   // -> DelayQueueBuilder; name validated
//!     .fetch_interval(Duration::from_secs(1))        // consume tick, default 1 s
//!     .max_consume_duration(Duration::from_secs(5))  // visibility timeout, default 5 s
//!     .fetch_limit(100)                              // max messages in flight per consumer
//!     .concurrency(16)                               // handler tasks per consumer, default 1
//!     .default_retry_count(3)                        // default 3: at most 4 deliveries
//!     .expire_after(Duration::from_secs(3600))       // opt-in: discard if undelivered 1 h past due (default: never)
//!     .build()?;                                     // -> Result<DelayQueue, Error>
//!                                                    // failed deliveries back off exponentially (see Backoff)
//!
//! let id: MessageId = queue.send("payload").delay(Duration::from_millis(1500)).await?;
//! let id = queue.send(b"bytes".to_vec()).at(SystemTime::now() + Duration::from_secs(60)).await?;
//! let id = queue.send("close order 42")               // per-message options, then .await
//!     .delay(Duration::from_secs(1800))
//!     .retry_count(5).expire_after(Duration::from_secs(600)).id("order-42").await?;
//! let cancelled: bool = queue.cancel("order-42").await?;  // true if it will not be delivered
//! let counts: Counts = queue.counts().await?;         // pending, ready, processing, retry, dead
//!
//! let consumer = queue.start_consume(CloseOrder).await?;   // spawns on the caller's tokio runtime
//! consumer.shutdown().await?;                              // graceful: finish in-flight work, ack/nack it
//!
//! // Async closures are handlers too.
//! let consumer = queue.start_consume(|msg: Message| async move {
//!     println!("{} is due", msg.id());
//!     Ok::<(), HandlerError>(())
//! }).await?;
//! consumer.shutdown().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub, unnameable_types, missing_debug_implementations)]
// docs.rs builds with every feature and `--cfg docsrs` (Cargo.toml): each
// feature-gated item then says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod batch;
mod connect;
mod consume;
mod error;
mod events;
mod flow;
mod handler;
mod id;
mod info;
mod maxima;
mod message;
mod meters;
mod middleware;
#[cfg(feature = "otel")]
mod otel;
mod payload;
mod queue;
mod registry;
mod schedule;
mod scribe;
mod status;
mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "web")]
#[cfg_attr(docsrs, doc(cfg(feature = "web")))]
pub mod web;

pub use backoff::Backoff;
pub use batch::BatchHandler;
pub use connect::connect;
pub use consume::{Consumer, Scheduler};
pub use error::Error;
pub use events::{Action, Event};
pub use flow::{
    ChildOutcome, ChildPolicy, ChildResult, ChildrenPage, FlowNode, FlowPage, FlowParent, FlowTree, MessageRef,
    FLOW_PAGE, FLOW_TREE_NODES,
};
pub use handler::{Handler, HandlerError, IntoResult, RetryAfter, SkipRetry};
pub use id::{MessageId, MAX_ID_LEN};
pub use info::{Found, GroupInfo, GroupPage, MessageInfo, Order, Page, MAX_PAGE, PREVIEW_BYTES};
pub use maxima::{
    MAX_BATCH_SIZE, MAX_DELAY, MAX_FLOW_CHILDREN, MAX_FLOW_DEPTH, MAX_GROUP_LEN, MAX_HEADERS, MAX_HEADERS_BYTES,
    MAX_HEADER_NAME_LEN, MAX_LOG_LINE, MAX_LOG_LINES, MAX_PRIORITY, MAX_PROGRESS, MAX_RESULT_SIZE, MAX_RETRY_COUNT,
    MAX_WINDOW,
};
pub use message::Message;
pub use meters::describe_metrics;
pub use middleware::{service, HandlerService, ServiceHandler};
pub use payload::{IntoPayload, Json, Payload};
pub use queue::{
    consumers, find_queues, recorded_shards, Anomaly, Browse, Cohort, CohortBuilder, CohortStatus, ConsumeBatch,
    DelayQueue, DelayQueueBuilder, Durability, Flow, FoundQueue, IntegrityReport, NewMessage, Search, Sent, Worker,
    COHORT_HEADER, MAX_CONSUMERS_LISTED, MAX_SCAN,
};
#[allow(deprecated)]
pub use queue::{Batch, BatchBuilder, BatchStatus, BATCH_HEADER};
pub use registry::{
    ConsumedQueue, ConsumerInfo, LiveConsumers, RunningMessage, SkippedEntry, ENTRY_VERSION, MAX_ENTRY_BYTES,
    MAX_QUEUES_LISTED, MAX_RUNNING_LISTED,
};
pub use schedule::{
    Misfire, Schedule, ScheduleInfo, DEFAULT_MISFIRE_GRACE, MAX_SCHEDULES, MAX_SCHEDULE_NAME_LEN, MIN_INTERVAL,
};
pub use status::{AbortOutcome, Counts, MessageState, QueueStatus, RateLimit, Totals};
pub use store::keys::{MAX_QUEUE_NAME_LEN, MAX_SHARDS};

// The unit tests' harness, the crate the integration tests use too.
#[cfg(test)]
use delayqueue_test_support as test_support;
#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod design_tests;
#[cfg(test)]
mod producer_files_tests;
#[cfg(test)]
mod validation_cases;

/// The `fred` version this crate is built on, so users create clients with the same one.
pub use fred;

/// The attribute that makes an `impl Handler` with an `async fn` compile:
/// `#[delayqueue::async_trait]`, so users need no `async-trait` of their own.
pub use async_trait::async_trait;

/// The Rust code blocks of the README and of docs/, compiled as doctests so
/// they cannot drift from the types: one hidden item per page. A block that
/// cannot compile says why in its `rust,ignore` fence.
#[cfg(doctest)]
mod doc_pages {
    macro_rules! pages {
        ($($(#[$cfg:meta])* $name:ident = $path:literal;)*) => {$(
            $(#[$cfg])*
            #[doc = include_str!($path)]
            pub struct $name;
        )*};
    }

    pages! {
        Readme = "../README.md";
        Dedup = "../docs/dedup.md";
        Groups = "../docs/groups.md";
        Handlers = "../docs/handlers.md";
        Limits = "../docs/limits.md";
        Operations = "../docs/operations.md";
        Priorities = "../docs/priorities.md";
        Results = "../docs/results.md";
        Schedules = "../docs/schedules.md";
        Workers = "../docs/workers.md";
        Workflows = "../docs/workflows.md";
        // Its TLS example uses fred's rustls types.
        #[cfg(feature = "tls")]
        Scaling = "../docs/scaling.md";
        #[cfg(feature = "web")]
        Web = "../docs/web.md";
        #[cfg(feature = "testing")]
        Testing = "../docs/testing.md";
    }
}
