//! End-to-end behaviour of producer and consumer against a real Redis: the
//! scenarios of `tests/e2e/scenarios.rs`, each run as one test per backend
//! (`tests/e2e/backends.rs`):
//!
//! - `single_server::*`: a private `redis-server` per test;
//! - `cluster::*`: a local 3-primary Redis Cluster (shared by the cluster
//!   tests that run at the same time, each with its own client and queue
//!   names) and a fred cluster client;
//! - `sharded_cluster::*`: the same cluster, every queue spread over 4
//!   shards (`DelayQueueBuilder::shards`).
//!
//! Filter by mode with e.g. `cargo test --test e2e cluster::`. Another
//! backend is a type implementing `backends::Backend` (one that only
//! changes the queue settings wraps an existing one and overrides
//! `configure`) and a module here expanding `scenario_tests!` with it.

mod helpers;
use delayqueue_test_support as support;

#[path = "e2e/backends.rs"]
mod backends;
#[path = "e2e/scenarios.rs"]
mod scenarios;

mod single_server {
    crate::scenarios::scenario_tests!(crate::backends::SingleServer);
}

mod cluster {
    crate::scenarios::scenario_tests!(crate::backends::Cluster);
}

mod sharded_cluster {
    crate::scenarios::scenario_tests!(crate::backends::ShardedCluster);
}
