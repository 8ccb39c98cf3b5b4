//! One queue: `GET /api/queues/{name}` (one status per shard) and its
//! rates' history (memory only).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};

use super::error::{find, ApiResult};
use super::overview::queue_json;
use crate::web::json::{HistoryJson, PointJson, QueueJson, ShardJson};
use crate::web::state::App;
use crate::QueueStatus;

pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<QueueJson> {
    crate::web::background::start(&app);
    let q = find(&app, &name).await?;
    app.sampler.watch([q.name()]);
    let shards = q.shard_statuses().await?;
    let merged = shards.iter().copied().reduce(QueueStatus::merge).unwrap_or_default();
    let mut json = queue_json(&app, &q, &merged);
    if query.get("shards").is_some_and(|v| v == "1" || v == "true") {
        json.shard_status = Some(
            shards
                .iter()
                .enumerate()
                .map(|(shard, s)| ShardJson {
                    shard,
                    status: s.into(),
                })
                .collect(),
        );
    }
    Ok(axum::Json(json))
}

pub(crate) async fn history(State(app): State<Arc<App>>, Path(name): Path<String>) -> ApiResult<HistoryJson> {
    crate::web::background::start(&app);
    let q = find(&app, &name).await?;
    app.sampler.watch([q.name()]);
    Ok(axum::Json(HistoryJson {
        step_ms: u64::try_from(app.sampler.step().as_millis()).unwrap_or(u64::MAX),
        points: app
            .sampler
            .history(q.name())
            .into_iter()
            .map(|p| PointJson {
                t_ms: p.t_ms,
                rates: p.rates.into(),
            })
            .collect(),
    }))
}
