//! Acting on a queue (every one a `POST`, let through by the CSRF guard):
//! send, cancel, abort, reschedule, run now, requeue or delete dead letters,
//! pause and resume. Each is logged at INFO (target `delayqueue::web`)
//! with the user.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::error::{find, ApiError, ApiResult};
use crate::web::auth::User;
use crate::web::json::bodies::{DeadBody, SendBody, WhenBody};
use crate::web::state::App;
use crate::DelayQueue;

/// Most ids one requeue or delete takes (one Redis call each).
const MAX_IDS: usize = 1000;

const TARGET: &str = "delayqueue::web";

/// The JSON body; 400 with serde's message when it does not fit.
pub(super) fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad(format!("invalid body: {e}")))
}

/// `delay_ms` or `at_ms` (ms since the epoch), not both; neither: now.
pub(super) fn delay_of(delay_ms: Option<u64>, at_ms: Option<u64>) -> Result<Duration, ApiError> {
    match (delay_ms, at_ms) {
        (Some(_), Some(_)) => Err(ApiError::bad("give delay_ms or at_ms, not both")),
        (Some(d), None) => Ok(Duration::from_millis(d)),
        (None, Some(at)) => {
            let at = UNIX_EPOCH + Duration::from_millis(at);
            Ok(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
        }
        (None, None) => Ok(Duration::ZERO),
    }
}

/// A reschedule's body: `{"delay_ms": ..}` or `{"at_ms": ..}`, one of them
/// required (unlike a send, where neither means now).
pub(super) fn reschedule_delay(bytes: &Bytes) -> Result<Duration, ApiError> {
    let b: WhenBody = body(bytes)?;
    if b.delay_ms.is_none() && b.at_ms.is_none() {
        return Err(ApiError::bad("give delay_ms or at_ms"));
    }
    delay_of(b.delay_ms, b.at_ms)
}

type Ctx = (State<Arc<App>>, Extension<User>);

pub(crate) async fn send(
    State(app): State<Arc<App>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult<Value> {
    let b: SendBody = body(&bytes)?;
    let delay = delay_of(b.delay_ms, b.at_ms)?;
    let q = find(&app, &name).await?;
    let mut send = q.send(b.payload).delay(delay);
    if let Some(id) = b.id {
        send = send.id(id);
    }
    if let Some(n) = b.retry_count {
        send = send.retry_count(n);
    }
    let id = send.await?;
    tracing::info!(target: TARGET, action = "send", queue = %name, %id, delay_ms = delay.as_millis() as u64, user = user.log_name(), "dashboard action");
    Ok(axum::Json(json!({ "id": id })))
}

/// Runs `act` on message `id` of queue `name` and logs it: `{"done": bool}`.
async fn on_message<F, Fut>(app: &App, user: &User, action: &str, name: &str, id: &str, act: F) -> ApiResult<Value>
where
    F: FnOnce(DelayQueue) -> Fut,
    Fut: std::future::Future<Output = Result<bool, crate::Error>>,
{
    let q = find(app, name).await?;
    let done = act(q).await?;
    tracing::info!(target: TARGET, action, queue = %name, %id, done, user = user.log_name(), "dashboard action");
    Ok(axum::Json(json!({ "done": done })))
}

pub(crate) async fn cancel(
    (State(app), Extension(user)): Ctx,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Value> {
    let target = id.clone();
    on_message(
        &app,
        &user,
        "cancel",
        &name,
        &id,
        |q| async move { q.cancel(&target).await },
    )
    .await
}

/// Aborts message `id` (a running one's handler is told): `{"done": bool,
/// "outcome": ..}` as the producer API's abort.
pub(crate) async fn abort(
    (State(app), Extension(user)): Ctx,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Value> {
    let outcome = find(&app, &name).await?.abort(&id).await?;
    let (done, outcome) = (outcome.done(), outcome.as_str());
    tracing::info!(target: TARGET, action = "abort", queue = %name, %id, done, outcome, user = user.log_name(), "dashboard action");
    Ok(axum::Json(json!({ "done": done, "outcome": outcome })))
}

pub(crate) async fn reschedule(
    (State(app), Extension(user)): Ctx,
    Path((name, id)): Path<(String, String)>,
    bytes: Bytes,
) -> ApiResult<Value> {
    let delay = reschedule_delay(&bytes)?;
    let target = id.clone();
    on_message(&app, &user, "reschedule", &name, &id, |q| async move {
        q.reschedule(&target, delay).await
    })
    .await
}

pub(crate) async fn run_now(
    (State(app), Extension(user)): Ctx,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Value> {
    let target = id.clone();
    on_message(&app, &user, "run", &name, &id, |q| async move {
        q.reschedule(&target, Duration::ZERO).await
    })
    .await
}

/// Which dead letters a body names.
enum Dead {
    All,
    Ids(Vec<String>),
}

fn dead_of(bytes: &Bytes) -> Result<Dead, ApiError> {
    let b: DeadBody = body(bytes)?;
    match (b.ids, b.all) {
        (Some(_), true) => Err(ApiError::bad("give ids or all, not both")),
        (None, true) => Ok(Dead::All),
        (Some(ids), false) if !ids.is_empty() && ids.len() <= MAX_IDS => Ok(Dead::Ids(ids)),
        (Some(_), false) => Err(ApiError::bad(format!("ids must hold 1 to {MAX_IDS} ids"))),
        (None, false) => Err(ApiError::bad("give ids or \"all\": true")),
    }
}

/// Requeues (`delete` false) or deletes dead letters: `{"count": n}`.
async fn on_dead(app: &App, user: &User, name: &str, which: Dead, delete: bool) -> ApiResult<Value> {
    let q = find(app, name).await?;
    let action = if delete { "delete dead" } else { "requeue dead" };
    let count = match &which {
        Dead::All if delete => q.delete_all_dead().await?,
        Dead::All => q.requeue_all_dead().await?,
        Dead::Ids(ids) => {
            let mut n = 0;
            for id in ids {
                let done = if delete {
                    q.delete_dead(id).await?
                } else {
                    q.requeue_dead(id).await?
                };
                n += u64::from(done);
            }
            n
        }
    };
    match which {
        Dead::All => {
            tracing::info!(target: TARGET, action, queue = %name, all = true, count, user = user.log_name(), "dashboard action")
        }
        Dead::Ids(ids) => {
            tracing::info!(target: TARGET, action, queue = %name, ids = ?ids, count, user = user.log_name(), "dashboard action")
        }
    }
    Ok(axum::Json(json!({ "count": count })))
}

pub(crate) async fn requeue(
    (State(app), Extension(user)): Ctx,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult<Value> {
    on_dead(&app, &user, &name, dead_of(&bytes)?, false).await
}

pub(crate) async fn delete(
    (State(app), Extension(user)): Ctx,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult<Value> {
    on_dead(&app, &user, &name, dead_of(&bytes)?, true).await
}

/// Pauses (`pause` true) or resumes a queue: `{"paused": bool}`, its state now.
async fn set_paused(app: &App, user: &User, name: &str, pause: bool) -> ApiResult<Value> {
    let q = find(app, name).await?;
    let changed = if pause { q.pause().await? } else { q.resume().await? };
    let action = if pause { "pause" } else { "resume" };
    tracing::info!(target: TARGET, action, queue = %name, changed, user = user.log_name(), "dashboard action");
    Ok(axum::Json(json!({ "paused": pause })))
}

pub(crate) async fn pause((State(app), Extension(user)): Ctx, Path(name): Path<String>) -> ApiResult<Value> {
    set_paused(&app, &user, &name, true).await
}

pub(crate) async fn resume((State(app), Extension(user)): Ctx, Path(name): Path<String>) -> ApiResult<Value> {
    set_paused(&app, &user, &name, false).await
}
