//! The JSON API under `/api`: reading (overview, consumers, queue, messages, flows,
//! schedules, groups), acting (actions, schedules, groups), the producer API for programs
//! under `/api/v1`, and how their errors become HTTP statuses.

mod actions;
mod consumers;
pub(crate) mod error;
mod flow;
mod groups;
mod messages;
mod overview;
mod producer;
mod queue;
mod schedules;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;

use crate::web::state::App;
use error::ApiError;

/// The producer API (docs/web.md, "Producer API").
fn producer_routes() -> Router<Arc<App>> {
    Router::new()
        .route("/queues/{name}/messages", post(producer::send))
        .route("/queues/{name}/batch", post(producer::batch))
        .route("/queues/{name}/messages/{id}", get(messages::one))
        .route("/queues/{name}/messages/{id}/flow", get(flow::tree))
        .route("/queues/{name}/messages/{id}/flow/children", get(flow::children))
        .route("/queues/{name}/messages/{id}/cancel", post(producer::cancel))
        .route("/queues/{name}/messages/{id}/abort", post(producer::abort))
        .route("/queues/{name}/messages/{id}/reschedule", post(producer::reschedule))
}

pub(crate) fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/overview", get(overview::overview))
        .route("/consumers", get(consumers::list))
        .route("/queues/{name}", get(queue::queue))
        .route("/queues/{name}/history", get(queue::history))
        .route("/queues/{name}/messages", get(messages::list).post(actions::send))
        .route("/queues/{name}/search", get(messages::search))
        .route("/queues/{name}/messages/{id}", get(messages::one))
        .route("/queues/{name}/messages/{id}/flow", get(flow::tree))
        .route("/queues/{name}/messages/{id}/flow/children", get(flow::children))
        .route("/queues/{name}/messages/{id}/cancel", post(actions::cancel))
        .route("/queues/{name}/messages/{id}/abort", post(actions::abort))
        .route("/queues/{name}/messages/{id}/reschedule", post(actions::reschedule))
        .route("/queues/{name}/messages/{id}/run", post(actions::run_now))
        .route("/queues/{name}/dead/requeue", post(actions::requeue))
        .route("/queues/{name}/dead/delete", post(actions::delete))
        .route("/queues/{name}/pause", post(actions::pause))
        .route("/queues/{name}/resume", post(actions::resume))
        .route("/queues/{name}/groups", get(groups::list))
        .route("/queues/{name}/groups/{group}", get(groups::one))
        .route("/queues/{name}/groups/{group}/limits", post(groups::limits))
        .route("/queues/{name}/groups/{group}/pause", post(groups::pause))
        .route("/queues/{name}/groups/{group}/resume", post(groups::resume))
        .route("/queues/{name}/schedules", get(schedules::list))
        .route("/queues/{name}/schedules/{schedule}/pause", post(schedules::pause))
        .route("/queues/{name}/schedules/{schedule}/resume", post(schedules::resume))
        .route("/queues/{name}/schedules/{schedule}/trigger", post(schedules::trigger))
        .nest("/v1", producer_routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
}
