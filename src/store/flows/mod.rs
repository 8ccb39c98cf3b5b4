//! Flows in the store (docs/workflows.md): reading a parent's children
//! and a child's links ([`reads`]), and the relay that carries each shard's
//! outbox to the parents' slots ([`relay`]). The flow scripts' operations
//! are `ops/flow_*.rs` and `ops/outbox.rs`; the wire values they take,
//! `crate::flow::wire`.

pub(crate) mod reads;
pub(crate) mod relay;
