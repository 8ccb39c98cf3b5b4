//! [`Context`]: everything a consumer is given to run with, so the runtime
//! needs nothing of the queue handle.

use std::sync::Arc;

use fred::prelude::Client;

use super::settings::Settings;
use crate::events::Events;
use crate::meters::Meters;
use crate::store::{Keys, Shard};

/// What the queue handle hands a consumer it starts.
#[derive(Debug)]
pub(crate) struct Context {
    /// The queue's name, for logs and errors.
    pub name: String,
    /// The key prefix of its keys: the registry of live consumers is under it.
    pub prefix: String,
    pub client: Client,
    /// On a cluster, the primaries its commands go to (kept while it runs).
    pub _nodes: crate::store::nodes::Hold,
    /// The keys of each shard: one set for an ordinary queue (shared
    /// with the queue handle).
    pub shards: Arc<[Keys]>,
    pub settings: Settings,
    /// Its metrics: the queue handle's.
    pub meters: Arc<Meters>,
    /// Where the queue's events go.
    pub events: Events,
}

impl Context {
    /// The store handle of the shard with keys `k`.
    pub(crate) fn store<'a>(&'a self, k: &'a Keys) -> Shard<'a> {
        Shard::new(&self.client, k, &self.name)
    }
}
