//! A queue's groups (docs/groups.md): `GET /api/queues/{name}/groups`
//! lists one page of them, `GET .../groups/{group}` reads one by name;
//! pause, resume and limits are actions like the others: `POST`, CSRF
//! guard, logged at INFO (target `delayqueue::web`) with the user. An
//! invalid group name is a 400.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use serde_json::{json, Value};

use super::actions::body;
use super::error::{find, ApiError, ApiResult};
use super::messages::limit_of;
use crate::web::auth::User;
use crate::web::json::bodies::GroupLimitsBody;
use crate::web::json::{GroupJson, GroupsJson, OneGroupJson};
use crate::web::state::App;
use crate::RateLimit;

const TARGET: &str = "delayqueue::web";

type Ctx = (State<Arc<App>>, Extension<User>);

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<GroupsJson> {
    let limit = limit_of(&query)?;
    let offset = match query.get("offset") {
        None => 0,
        Some(o) => o
            .parse()
            .map_err(|_| ApiError::bad("offset must be a whole number").param("offset"))?,
    };
    let q = find(&app, &name).await?;
    let page = q.groups(offset, limit).await?;
    Ok(axum::Json(GroupsJson::new(&page, offset, limit)))
}

/// Pauses (`pause` true) or resumes group `group`: `{"paused": bool}`, its
/// state now, and `changed`, false when it was so already.
async fn set_paused(app: &App, user: &User, name: &str, group: &str, pause: bool) -> ApiResult<Value> {
    let q = find(app, name).await?;
    let changed = if pause {
        q.pause_group(group).await?
    } else {
        q.resume_group(group).await?
    };
    let action = if pause { "pause group" } else { "resume group" };
    tracing::info!(target: TARGET, action, queue = %name, group, changed, user = user.log_name(), "dashboard action");
    Ok(axum::Json(json!({ "paused": pause, "changed": changed })))
}

pub(crate) async fn pause(
    (State(app), Extension(user)): Ctx,
    Path((name, group)): Path<(String, String)>,
) -> ApiResult<Value> {
    set_paused(&app, &user, &name, &group, true).await
}

pub(crate) async fn resume(
    (State(app), Extension(user)): Ctx,
    Path((name, group)): Path<(String, String)>,
) -> ApiResult<Value> {
    set_paused(&app, &user, &name, &group, false).await
}

/// One group by name, with the queue's defaults; 404 when the queue does
/// not know it.
pub(crate) async fn one(
    State(app): State<Arc<App>>,
    Path((name, group)): Path<(String, String)>,
) -> ApiResult<OneGroupJson> {
    let q = find(&app, &name).await?;
    let g = q
        .group(&group)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no group named {group:?}")))?;
    // The defaults come with any page; one row is the cheapest.
    let defaults = q.groups(0, 1).await?;
    Ok(axum::Json(OneGroupJson::new(&g, &defaults)))
}

/// Sets or drops a group's own concurrency and rate (body:
/// [`GroupLimitsBody`]): `changed`, and the group as it is now (`null`
/// when nothing of it is left).
pub(crate) async fn limits(
    (State(app), Extension(user)): Ctx,
    Path((name, group)): Path<(String, String)>,
    bytes: Bytes,
) -> ApiResult<Value> {
    let b: GroupLimitsBody = body(&bytes)?;
    if b.concurrency.is_none() && b.rate.is_none() {
        return Err(ApiError::bad("give concurrency or rate (null drops the group's own)"));
    }
    let q = find(&app, &name).await?;
    let mut changed = false;
    if let Some(c) = b.concurrency {
        changed |= q.set_group_concurrency(&group, c).await?;
    }
    if let Some(r) = b.rate {
        let rate = r.map(|r| RateLimit::new(r.limit, Duration::from_millis(r.per_ms)));
        changed |= q.set_group_rate(&group, rate).await?;
    }
    tracing::info!(target: TARGET, action = "group limits", queue = %name, group, changed, user = user.log_name(), "dashboard action");
    let now = q.group(&group).await?;
    Ok(axum::Json(
        json!({ "changed": changed, "group": now.as_ref().map(GroupJson::from) }),
    ))
}
