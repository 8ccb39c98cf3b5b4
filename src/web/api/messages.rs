//! Reading messages: a page of a state, a search, one message.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::error::{find, ApiError, ApiResult};
use crate::web::json::{FoundJson, MessageJson, PageJson};
use crate::web::state::App;
use crate::{MessageState, MAX_PAGE};

/// Most messages one page of the API holds.
const MAX_LIMIT: usize = 200;
const DEFAULT_LIMIT: usize = 50;
/// Most messages one search request looks at.
const SEARCH_WINDOW: usize = 10_000;

type Params = Query<HashMap<String, String>>;

fn state_of(query: &HashMap<String, String>) -> Result<MessageState, ApiError> {
    Ok(query.get("state").map_or("pending", String::as_str).parse()?)
}

/// The position a cursor holds (none: the start).
fn cursor_of(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("cursor").filter(|c| !c.is_empty()) {
        None => Ok(0),
        Some(c) => c.parse().map_err(|_| ApiError::bad(format!("invalid cursor {c:?}"))),
    }
}

pub(crate) async fn list(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Params,
) -> ApiResult<PageJson> {
    let state = state_of(&query)?;
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse()
            .ok()
            .filter(|l| (1..=MAX_LIMIT).contains(l))
            .ok_or_else(|| ApiError::bad(format!("limit must be 1 to {MAX_LIMIT}")))?,
    };
    match query.get("order").map(String::as_str) {
        None | Some("asc") => {}
        Some(o) => return Err(ApiError::bad(format!("unsupported order {o:?}: asc"))),
    }
    let cursor = cursor_of(&query)?;
    let q = find(&app, &name).await?;
    let page = q.list(state, cursor, limit).await?;
    Ok(axum::Json(PageJson {
        state: state.as_str(),
        total: page.total,
        items: page.items.iter().map(MessageJson::from).collect(),
        next: page.next.map(|n| n.to_string()),
    }))
}

pub(crate) async fn search(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(query): Params,
) -> ApiResult<FoundJson> {
    let state = state_of(&query)?;
    let text = query.get("q").map_or("", String::as_str);
    if text.is_empty() {
        return Err(ApiError::bad("q (the text to search for) is empty"));
    }
    let start = cursor_of(&query)?;
    let q = find(&app, &name).await?;
    let mut found = FoundJson {
        items: Vec::new(),
        scanned: 0,
        next: None,
        id_match: false,
    };
    // An exact id first: one lookup, before any scan.
    if start == 0 && crate::MessageId::check(text).is_ok() {
        if let Some(m) = q.get(text).await?.filter(|m| m.state == state) {
            found.items.push(MessageJson::from(&m));
            found.id_match = true;
        }
    }
    let mut at = Some(start);
    while let Some(offset) = at.filter(|o| o - start < SEARCH_WINDOW) {
        let page = q
            .list(state, offset, MAX_PAGE.min(SEARCH_WINDOW - (offset - start)))
            .await?;
        found.scanned += page.items.len() as u64;
        let needle = text.as_bytes();
        found.items.extend(
            page.items
                .iter()
                .filter(|m| m.id.as_str() != text && contains(&m.payload, needle))
                .map(MessageJson::from),
        );
        at = page.next;
    }
    found.next = at.map(|n| n.to_string());
    Ok(axum::Json(found))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

pub(crate) async fn one(
    State(app): State<Arc<App>>,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<MessageJson> {
    let q = find(&app, &name).await?;
    match q.get(&id).await? {
        Some(m) => Ok(axum::Json(MessageJson::from(&m))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no message {id:?} in queue {name:?}"),
        )),
    }
}
