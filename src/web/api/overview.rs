//! `GET /api/overview`: every queue with its status and rates, in one
//! `TIME` plus one status script per shard of every queue.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Extension, State};
use fred::prelude::ClientLike;

use super::error::{ApiError, ApiResult};
use crate::web::auth::User;
use crate::web::json::{epoch_ms, OverviewJson, QueueJson};
use crate::web::registry::statuses;
use crate::web::state::App;
use crate::{DelayQueue, Error, QueueStatus};

pub(crate) async fn overview(State(app): State<Arc<App>>, Extension(user): Extension<User>) -> ApiResult<OverviewJson> {
    crate::web::background::start(&app);
    let queues = app.registry.all().await?;
    let (now, statuses) = tokio::join!(redis_now(&app), statuses(&queues));
    let queues = statuses
        .into_iter()
        .map(|(q, s)| Ok::<_, Error>(queue_json(&app, &q, &s?)))
        .collect::<Result<_, _>>()?;
    Ok(axum::Json(OverviewJson {
        read_only: app.read_only,
        csrf: app.csrf.clone(),
        user: user.0,
        now_ms: now?,
        queues,
    }))
}

/// A queue's JSON from its status, with the sampler's rates.
pub(crate) fn queue_json(app: &App, q: &DelayQueue, s: &QueueStatus) -> QueueJson {
    QueueJson {
        name: q.name().to_string(),
        shards: q.shards(),
        status: s.into(),
        rates: app.sampler.rates(q.name()).into(),
        shard_status: None,
    }
}

/// Redis's clock, which the queue's times are on, in ms since the epoch.
async fn redis_now(app: &App) -> Result<u64, ApiError> {
    let reply: Vec<u64> = app
        .client
        .custom(fred::cmd!("TIME"), Vec::<String>::new())
        .await
        .map_err(Error::from)?;
    match reply[..] {
        [secs, micros] => Ok(epoch_ms(
            UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros),
        )),
        _ => Err(Error::Internal(format!("unexpected reply to TIME: {reply:?}")).into()),
    }
}
