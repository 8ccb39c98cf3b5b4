//! The producer API under `/api/v1`, for programs rather than the page:
//! send one message or a batch, cancel, abort, reschedule (reading a message is
//! the dashboard's own `messages::one`). Its writes need
//! no CSRF token but credentials in the `Authorization` header and a JSON
//! body (`csrf::check` and `auth::check` say why). A queue that does not
//! exist yet is created by its first message, as `DelayQueue::send` does.
//! A message may wait for others (`after`, docs/workflows.md), of its queue
//! or of others, named by queue and id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{json, Value};

use super::actions::{body, delay_of, reschedule_delay};
use super::error::{ApiError, ApiResult};
use crate::web::json::bodies::{AfterRef, BatchBody, ProduceBody, QueuedRef};
use crate::web::state::App;
use crate::{DelayQueue, Error, MessageId, MessageRef, NewMessage};

/// Most messages one batch request takes.
const MAX_BATCH: usize = 1000;

/// The handles of the other queues that the bodies' `after` refs name
/// (queue `name`'s own refs need none), checked: a bad queue name is a 400.
async fn ref_queues(app: &App, name: &str, bodies: &[ProduceBody]) -> Result<HashMap<String, DelayQueue>, ApiError> {
    let mut queues = HashMap::new();
    for b in bodies {
        for r in b.after.iter().flatten() {
            if let AfterRef::Ref(QueuedRef { queue: Some(q), .. }) = r {
                if q != name && !queues.contains_key(q) {
                    let handle = queue_of(app, q).await.map_err(|e| e.context("after"))?;
                    queues.insert(q.clone(), handle);
                }
            }
        }
    }
    Ok(queues)
}

/// The message a body describes, checked (payload, times) before any is
/// sent; `queues`: those its `after` names ([`ref_queues`]).
fn message_of(b: ProduceBody, queues: &HashMap<String, DelayQueue>) -> Result<NewMessage, ApiError> {
    let payload = match (b.payload, b.payload_base64) {
        (Some(text), None) => text.into_bytes(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| ApiError::bad(format!("payload_base64: {e}")))?,
        _ => return Err(ApiError::bad("give payload or payload_base64, not both")),
    };
    let mut m = NewMessage::new(payload);
    // A replace without a time keeps the message's due time.
    if b.delay_ms.is_some() || b.at_ms.is_some() {
        m = m.delay(delay_of(b.delay_ms, b.at_ms)?);
    }
    if let Some(id) = b.id {
        m = m.id(id);
    }
    let modes =
        [b.unique_for_ms, b.throttle_ms, b.debounce_ms].iter().flatten().count() + usize::from(b.replace == Some(true));
    if modes > 1 {
        return Err(ApiError::bad(
            "give at most one of unique_for_ms, throttle_ms, debounce_ms and replace",
        ));
    }
    if b.debounce_ms.is_some() && (b.delay_ms.is_some() || b.at_ms.is_some()) {
        return Err(ApiError::bad(
            "debounce_ms sets the due time: give no delay_ms or at_ms with it",
        ));
    }
    if let Some(ms) = b.unique_for_ms {
        m = m.unique_for(Duration::from_millis(ms));
    }
    if let Some(ms) = b.throttle_ms {
        m = m.throttle(Duration::from_millis(ms));
    }
    if let Some(ms) = b.debounce_ms {
        m = m.debounce(Duration::from_millis(ms));
    }
    if b.replace == Some(true) {
        m = m.replacing();
    }
    if let Some(n) = b.retry_count {
        m = m.retry_count(n);
    }
    if let Some(p) = b.priority {
        m = m.priority(p);
    }
    if let Some(g) = b.group {
        m = m.group(g);
    }
    for (name, value) in b.headers.into_iter().flatten() {
        m = m.header(name, value);
    }
    let refs = b.after.into_iter().flatten().map(|r| match r {
        AfterRef::Id(id) | AfterRef::Ref(QueuedRef { queue: None, id }) => MessageRef::from(id),
        AfterRef::Ref(QueuedRef { queue: Some(q), id }) => match queues.get(&q) {
            Some(other) => MessageRef::new(other, id),
            // The parent's own queue, which `ref_queues` leaves out.
            None => MessageRef::from(id),
        },
    });
    m = m.after(refs);
    if let Some(policy) = b.on_dead_child {
        m = m.on_dead_child(policy.into());
    }
    Ok(m)
}

async fn queue_of(app: &App, name: &str) -> Result<DelayQueue, ApiError> {
    Ok(app.registry.get_or_new(name).await?)
}

/// Sends the messages `bodies` describe to queue `name` (`what`: each
/// one's name in an error, from its place). A listed handle whose shard
/// count the queue no longer records (sharded since it was listed) is
/// refused with nothing written: it is dropped from the list, and the
/// messages are sent once more to the queue as Redis records it.
async fn send_to(
    app: &App,
    name: &str,
    bodies: Vec<ProduceBody>,
    what: impl Fn(usize) -> Option<String>,
) -> Result<Vec<Result<MessageId, Error>>, ApiError> {
    let queues = ref_queues(app, name, &bodies).await?;
    // Every message is checked before any is sent.
    let make = || {
        bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                message_of(b.clone(), &queues).map_err(|e| match what(i) {
                    Some(w) => e.context(&w),
                    None => e,
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    match queue_of(app, name).await?.send_batch(make()?).await {
        Err(Error::ShardCount { .. }) => {
            app.registry.forget(name);
            Ok(queue_of(app, name).await?.send_batch(make()?).await?)
        }
        sent => Ok(sent?),
    }
}

/// `POST /api/v1/queues/{name}/messages`: 201 `{"id": ..}`; 409 when the
/// id is live already.
pub(crate) async fn send(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut results = send_to(&app, &name, vec![body(&bytes)?], |_| None).await?;
    let id = results
        .pop()
        .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no result"))??;
    Ok((StatusCode::CREATED, axum::Json(json!({ "id": id }))).into_response())
}

/// `POST /api/v1/queues/{name}/batch` `{"messages": [..]}`: 200 and one
/// result per message, in order, `{"id": ..}` or `{"status": 409, "error":
/// ..}`. An invalid message fails the whole request before any is sent.
pub(crate) async fn batch(State(app): State<Arc<App>>, Path(name): Path<String>, bytes: Bytes) -> ApiResult<Value> {
    let b: BatchBody = body(&bytes)?;
    if b.messages.is_empty() || b.messages.len() > MAX_BATCH {
        return Err(ApiError::bad(format!("messages must hold 1 to {MAX_BATCH} messages")));
    }
    let results: Vec<Value> = send_to(&app, &name, b.messages, |i| Some(format!("messages[{i}]")))
        .await?
        .into_iter()
        .map(|r| match r {
            Ok(id) => json!({ "id": id }),
            Err(e) => {
                let e = ApiError::from(e);
                json!({ "status": e.status().as_u16(), "error": e.message() })
            }
        })
        .collect();
    Ok(axum::Json(json!({ "results": results })))
}

/// `POST .../cancel`: `{"done": bool}`.
pub(crate) async fn cancel(State(app): State<Arc<App>>, Path((name, id)): Path<(String, String)>) -> ApiResult<Value> {
    let done = queue_of(&app, &name).await?.cancel(&id).await?;
    Ok(axum::Json(json!({ "done": done })))
}

/// `POST .../abort`: `{"done": bool, "outcome": ..}` (docs/web.md).
pub(crate) async fn abort(State(app): State<Arc<App>>, Path((name, id)): Path<(String, String)>) -> ApiResult<Value> {
    let outcome = queue_of(&app, &name).await?.abort(&id).await?;
    Ok(axum::Json(
        json!({ "done": outcome.done(), "outcome": outcome.as_str() }),
    ))
}

/// `POST .../reschedule` `{"delay_ms": ..}` or `{"at_ms": ..}`: `{"done": bool}`.
pub(crate) async fn reschedule(
    State(app): State<Arc<App>>,
    Path((name, id)): Path<(String, String)>,
    bytes: Bytes,
) -> ApiResult<Value> {
    let delay = reschedule_delay(&bytes)?;
    let done = queue_of(&app, &name).await?.reschedule(&id, delay).await?;
    Ok(axum::Json(json!({ "done": done })))
}
