//! A queue's schedules: `GET /api/queues/{name}/schedules` lists them;
//! pause, resume and trigger (one fire now) are actions like the others:
//! `POST`, CSRF guard, logged at INFO (target `delayqueue::web`) with the
//! user. 404 for an unknown schedule.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Extension, Path, State};
use serde_json::{json, Value};

use super::error::{find, ApiResult};
use crate::web::auth::User;
use crate::web::json::{epoch_ms, SchedulesJson};
use crate::web::state::App;

const TARGET: &str = "delayqueue::web";

type Ctx = (State<Arc<App>>, Extension<User>);

pub(crate) async fn list(State(app): State<Arc<App>>, Path(name): Path<String>) -> ApiResult<SchedulesJson> {
    let q = find(&app, &name).await?;
    let items = q.schedules().await?.iter().map(Into::into).collect();
    Ok(axum::Json(SchedulesJson {
        now_ms: epoch_ms(SystemTime::now()),
        items,
    }))
}

/// What an action does to a schedule.
#[derive(Debug, Clone, Copy)]
enum Act {
    Pause,
    Resume,
    Trigger,
}

async fn act(app: &App, user: &User, name: &str, schedule: &str, what: Act) -> ApiResult<Value> {
    let q = find(app, name).await?;
    let (action, reply) = match what {
        Act::Pause => ("pause schedule", json!({ "done": q.pause_schedule(schedule).await? })),
        Act::Resume => ("resume schedule", json!({ "done": q.resume_schedule(schedule).await? })),
        Act::Trigger => (
            "trigger schedule",
            json!({ "id": q.trigger_schedule(schedule).await?.as_str() }),
        ),
    };
    tracing::info!(target: TARGET, action, queue = %name, schedule, reply = %reply, user = user.log_name(), "dashboard action");
    Ok(axum::Json(reply))
}

pub(crate) async fn pause(
    (State(app), Extension(user)): Ctx,
    Path((name, s)): Path<(String, String)>,
) -> ApiResult<Value> {
    act(&app, &user, &name, &s, Act::Pause).await
}

pub(crate) async fn resume(
    (State(app), Extension(user)): Ctx,
    Path((name, s)): Path<(String, String)>,
) -> ApiResult<Value> {
    act(&app, &user, &name, &s, Act::Resume).await
}

pub(crate) async fn trigger(
    (State(app), Extension(user)): Ctx,
    Path((name, s)): Path<(String, String)>,
) -> ApiResult<Value> {
    act(&app, &user, &name, &s, Act::Trigger).await
}
