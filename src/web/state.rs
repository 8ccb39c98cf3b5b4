//! What every handler shares: [`App`].

use std::sync::{Arc, OnceLock};

use fred::prelude::Client;

use super::registry::Registry;
use super::sampler::Sampler;

/// The dashboard's state, behind an `Arc` in the router.
#[derive(Debug)]
pub(crate) struct App {
    pub client: Client,
    pub registry: Registry,
    pub sampler: Sampler,
    pub read_only: bool,
    /// Required in `x-csrf-token` on every action.
    pub csrf: String,
    /// The application's own metrics text, appended to `/metrics`.
    pub process_metrics: Option<ProcessMetrics>,
    /// Groups per queue with gauges of their own in `/metrics`.
    pub group_metrics: usize,
    /// The background task (queue list refresh, sampling), started by the
    /// first request and aborted when the last router clone is dropped.
    pub background: OnceLock<AbortOnDrop>,
}

/// Renders the application's metrics recorder as Prometheus text
/// ([`Dashboard::process_metrics`](super::Dashboard::process_metrics)).
#[derive(Clone)]
pub(crate) struct ProcessMetrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMetrics(..)")
    }
}

/// Aborts its task when dropped, so a dropped router leaves no task behind.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
