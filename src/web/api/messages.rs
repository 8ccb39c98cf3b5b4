//! Reading messages: a page of a state ([`browse`](crate::DelayQueue::browse),
//! a stable cursor), a bounded search, one message.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::error::{find, ApiError, ApiResult};
use crate::web::json::{FinishedJson, FoundJson, MessageJson, OneJson, PageJson, ResultJson};
use crate::web::state::App;
use crate::{MessageState, Order};

/// Most messages one page or search reply of the API holds.
const MAX_LIMIT: usize = 200;
const DEFAULT_LIMIT: usize = 50;
/// Most messages one search request reads.
const SEARCH_WINDOW: usize = 10_000;

type Params = Query<HashMap<String, String>>;

fn state_of(query: &HashMap<String, String>) -> Result<MessageState, ApiError> {
    Ok(query.get("state").map_or("pending", String::as_str).parse()?)
}

/// `limit` (1 to [`MAX_LIMIT`], default [`DEFAULT_LIMIT`]) of a page.
pub(super) fn limit_of(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(DEFAULT_LIMIT),
        Some(l) => l
            .parse()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| ApiError::bad(format!("limit must be 1 to {MAX_LIMIT}"))),
    }
}

fn order_of(query: &HashMap<String, String>) -> Result<Order, ApiError> {
    match query.get("order").map(String::as_str) {
        None | Some("asc") => Ok(Order::Asc),
        Some("desc") => Ok(Order::Desc),
        Some(o) => Err(ApiError::bad(format!("unknown order {o:?}: asc or desc"))),
    }
}

/// The opaque cursor of the previous reply; none (or empty): the start.
pub(super) fn cursor_of(query: &HashMap<String, String>) -> Option<String> {
    query.get("cursor").filter(|c| !c.is_empty()).cloned()
}

/// `GET .../messages`: one browse call (one script call per shard it
/// reads; a sharded queue also one status per shard for the total).
pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Params,
) -> ApiResult<PageJson> {
    let state = state_of(&query)?;
    let (limit, order) = (limit_of(&query)?, order_of(&query)?);
    let q = find(&app, &name).await?;
    let page = q
        .browse(state)
        .order(order)
        .after(cursor_of(&query))
        .limit(limit)
        .await?;
    Ok(axum::Json(PageJson {
        state: state.as_str(),
        total: page.total,
        items: page.items.iter().map(MessageJson::from).collect(),
        next: page.cursor,
    }))
}

/// `GET .../search`: the id first (one lookup), then payloads of at most
/// [`SEARCH_WINDOW`] messages per request; `next` goes on from there.
pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Params,
) -> ApiResult<FoundJson> {
    let state = state_of(&query)?;
    let (limit, order) = (limit_of(&query)?, order_of(&query)?);
    let text = query.get("q").map_or("", String::as_str);
    let cursor = cursor_of(&query);
    let first = cursor.is_none();
    let q = find(&app, &name).await?;
    let found = q
        .search(state, text)
        .order(order)
        .after(cursor)
        .limit(limit)
        .scan(SEARCH_WINDOW)
        .await?;
    Ok(axum::Json(FoundJson {
        id_match: first && found.items.first().is_some_and(|m| m.id.as_str() == text),
        items: found.items.iter().map(MessageJson::from).collect(),
        scanned: found.scanned,
        next: found.cursor,
    }))
}

pub(crate) async fn one(State(app): State<Arc<App>>, Path((name, id)): Path<(String, String)>) -> ApiResult<OneJson> {
    let q = find(&app, &name).await?;
    if let Some(m) = q.get(&id).await? {
        return Ok(axum::Json(OneJson::Stored(Box::new(MessageJson::from(&m)))));
    }
    match q.result(&id).await? {
        Some(result) => Ok(axum::Json(OneJson::Finished(FinishedJson {
            id,
            finished: true,
            result: ResultJson::of(&result),
        }))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no message {id:?} in queue {name:?}"),
        )),
    }
}
