//! The background task: refreshes the listing of queues when stale and
//! samples the watched queues' totals for the rates, at the sampler's interval.
//! Started by the first request that needs it; it holds the state only
//! weakly and is aborted with it, so a dropped router leaves nothing running.

use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use super::registry::statuses;
use super::state::{AbortOnDrop, App};

/// Starts the task once.
pub(crate) fn start(app: &Arc<App>) {
    app.background.get_or_init(|| {
        let weak = Arc::downgrade(app);
        AbortOnDrop(tokio::spawn(run(weak)))
    });
}

/// This host's clock in ms since the epoch: when a sample was taken.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The background task: refreshes the listing when stale, then samples
/// the watched queues' totals; again every interval, until the dashboard
/// is dropped.
pub(crate) async fn run(app: Weak<App>) {
    let every = match app.upgrade() {
        Some(app) => app.sampler.step(),
        None => return,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else {
            return;
        };
        if let Err(e) = app.registry.refresh_if_stale().await {
            tracing::debug!(target: "delayqueue::web", error = %e, "cannot list the queues");
        }
        sample(&app).await;
    }
}

/// One status per shard of each watched queue (those a page showed lately).
async fn sample(app: &App) {
    let mut queues = Vec::new();
    for name in app.sampler.watched() {
        match app.registry.get(&name).await {
            Ok(Some(q)) => queues.push(q),
            Ok(None) => {}
            Err(e) => tracing::debug!(target: "delayqueue::web", queue = name, error = %e, "cannot sample"),
        }
    }
    let statuses = statuses(queues).await;
    let t_ms = now_ms();
    for (q, status) in statuses {
        match status {
            Ok(s) => app.sampler.record(q.name(), t_ms, s.totals),
            Err(e) => tracing::debug!(target: "delayqueue::web", queue = q.name(), error = %e, "cannot sample"),
        }
    }
}
