//! A flow read as a tree (docs/workflows.md): `GET .../messages/{id}/flow`
//! from any of its messages, and `GET .../messages/{id}/flow/children` for
//! a page of one node's children. Read-only, in both APIs.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::error::{find, ApiError, ApiResult};
use super::messages::cursor_of;
use crate::web::json::flows::{FlowJson, FlowNodeJson, FlowPageJson};
use crate::web::state::App;
use crate::Error;

/// `DelayQueue::flow`: 404 when the queue neither stores the message nor
/// keeps a flow of it; 400 for an invalid id.
pub(crate) async fn tree(State(app): State<Arc<App>>, Path((name, id)): Path<(String, String)>) -> ApiResult<FlowJson> {
    let q = find(&app, &name).await?;
    match q.flow(&id).await? {
        Some(tree) => Ok(axum::Json(FlowJson::from(&tree))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no message {id:?} in queue {name:?}, nor a flow of it"),
        )),
    }
}

/// `DelayQueue::flow_children` from `cursor` (none or empty: the first
/// page); 400 for an invalid id or cursor.
pub(crate) async fn children(
    State(app): State<Arc<App>>,
    Path((name, id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<FlowPageJson> {
    let q = find(&app, &name).await?;
    let page = match q.flow_children(&id, cursor_of(&query)).await {
        Err(e @ Error::InvalidArgument(_)) => return Err(ApiError::from(e).param("cursor")),
        other => other?,
    };
    Ok(axum::Json(FlowPageJson {
        children: page.items.iter().map(FlowNodeJson::from).collect(),
        next: page.next,
    }))
}
