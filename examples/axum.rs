//! An HTTP service that schedules work and consumes it in the same tokio
//! runtime: placing an order schedules its cancellation in 30 s unless it
//! is paid first. The queue dashboard is mounted at `/admin/queues`
//! (feature `web`), acting through the service's own queue handle.
//! Ctrl-C stops the server, then the consumer finishes its in-flight work.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --features web --example axum
//! curl -X POST localhost:3000/orders/42          # cancelled in 30 s ...
//! curl -X POST localhost:3000/orders/42/pay      # ... unless paid first
//! curl localhost:3000/stats
//! curl -H 'Authorization: Bearer change-me' localhost:3000/admin/queues/metrics   # Prometheus
//! open http://localhost:3000/admin/queues?token=$ADMIN_TOKEN   # the dashboard (default token: change-me)
//! ```

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use delayqueue::web::{Auth, Dashboard};
use delayqueue::{DelayQueue, HandlerError, Message, MessageId};
use serde_json::{json, Value};

/// How long an unpaid order lives (`ORDER_TIMEOUT_SECS`, default 30).
fn order_timeout() -> Duration {
    let secs = std::env::var("ORDER_TIMEOUT_SECS").ok().and_then(|s| s.parse().ok());
    Duration::from_secs(secs.unwrap_or(30))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = delayqueue::connect(&url).await?;
    let queue = DelayQueue::builder("example-order-timeouts", client.clone())
        .concurrency(8)
        .build()?;

    let consumer = queue
        .start_consume(|msg: Message| async move {
            let order: Value = msg.json()?;
            println!("order {} was not paid in time: cancelled", order["order"]);
            Ok::<(), HandlerError>(())
        })
        .await?;

    // nest_service, not nest: it serves both /admin/queues and /admin/queues/.
    let token = std::env::var("ADMIN_TOKEN").unwrap_or_else(|_| "change-me".into());
    // The process's own metrics (handler durations, lateness, ...) go to a
    // Prometheus recorder; the dashboard's /metrics appends them to the
    // queue-wide figures it reads from Redis.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    delayqueue::describe_metrics();
    let dashboard = Dashboard::new(client)
        .auth(Auth::Bearer(token))
        .queue(&queue)
        .process_metrics(move || metrics.render())
        .router()?;
    let app = Router::new()
        .route("/orders/{id}", post(place_order))
        .route("/orders/{id}/pay", post(pay_order))
        .route("/stats", get(stats))
        .with_state(queue.clone())
        .nest_service("/admin/queues", dashboard);
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            println!("shutting down: no new requests; finishing in-flight messages");
        })
        .await?;
    consumer.shutdown().await?;
    Ok(())
}

/// The timer's id is derived from the order, so placing it twice is
/// idempotent and paying can cancel it by id.
fn timer_id(order: u64) -> MessageId {
    format!("order-{order}").into()
}

fn error(e: delayqueue::Error) -> (StatusCode, String) {
    let status = match e {
        delayqueue::Error::Duplicate { .. } => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, e.to_string())
}

async fn place_order(
    State(queue): State<DelayQueue>,
    Path(order): Path<u64>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let payload = delayqueue::Json(json!({ "order": order }));
    let id = queue
        .send(payload)
        .delay(order_timeout())
        .id(timer_id(order))
        .await
        .map_err(error)?;
    Ok(Json(
        json!({ "order": order, "timer": id.to_string(), "cancel_in_secs": order_timeout().as_secs() }),
    ))
}

async fn pay_order(
    State(queue): State<DelayQueue>,
    Path(order): Path<u64>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let stopped = queue.cancel(&timer_id(order)).await.map_err(error)?;
    Ok(Json(json!({ "order": order, "paid": true, "timer_stopped": stopped })))
}

async fn stats(State(queue): State<DelayQueue>) -> Result<Json<Value>, (StatusCode, String)> {
    let s = queue.status().await.map_err(error)?;
    Ok(Json(json!({
        "pending": s.counts.pending,
        "ready": s.counts.ready,
        "processing": s.counts.processing,
        "retry": s.counts.retry,
        "dead": s.counts.dead,
        "sent": s.totals.sent,
        "acked": s.totals.acked,
    })))
}
