//! The live consumers: `GET /api/consumers` (the registry of
//! docs/operations.md, "Live consumers"), each with what it runs now;
//! entries that cannot be read come in `skipped` with the reason.

use std::sync::Arc;

use axum::extract::State;

use super::error::ApiResult;
use crate::web::state::App;
use crate::LiveConsumers;

pub(crate) async fn list(State(app): State<Arc<App>>) -> ApiResult<LiveConsumers> {
    Ok(axum::Json(crate::consumers(&app.client, app.registry.prefix()).await?))
}
