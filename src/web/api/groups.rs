//! A queue's groups (docs/groups.md): `GET /api/queues/{name}/groups`
//! lists one page of them; pause and resume are actions like the others:
//! `POST`, CSRF guard, logged at INFO (target `delayqueue::web`) with the
//! user. An invalid group name is a 400.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use serde_json::{json, Value};

use super::error::{find, ApiError, ApiResult};
use super::messages::limit_of;
use crate::web::auth::User;
use crate::web::json::GroupsJson;
use crate::web::state::App;

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
